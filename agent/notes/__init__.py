"""Repair notes: what fixed a failure in an earlier run (mine.py finds them in run folders, record.py is their
file, retrieve.py picks the ones that match a new failure for the loop's feedback)."""
