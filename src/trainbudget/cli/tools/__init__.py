"""The smaller questions: catalogs, intensity, mfu, fit, reliability and validate."""
