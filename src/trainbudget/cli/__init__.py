"""The command line: parsing, formatting and printing. The arithmetic lives in trainbudget.core."""
