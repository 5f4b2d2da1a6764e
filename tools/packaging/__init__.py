"""Building and checking lltm_ext distributions (imported by the tests and tools/release/)."""
