"""Reporting: diagnostics, forward computation, log parsing, parameter progress, exp-dir summaries."""
