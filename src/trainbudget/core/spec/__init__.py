"""Models, hardware, precisions, engines and frameworks as data: what every estimate reads."""
