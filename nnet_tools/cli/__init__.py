"""Thin click programs: option parsing plus one library call each."""
