"""The release: the prebuilt-wheel matrix and its find-links pages (imported by the tests)."""
