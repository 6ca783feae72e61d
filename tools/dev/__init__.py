"""Developer scripts (not part of the harness): what the harness costs and how far its timings hold."""
