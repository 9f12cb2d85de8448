"""Memory per GPU of a parallel plan: sharded state, the phase-by-phase peak, one rank's share."""
