"""Candidate generators, the search strategy and the lesson store."""
