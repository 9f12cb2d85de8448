"""Time of one step under a plan: compute rooflines, attention, collectives and their overlap."""
