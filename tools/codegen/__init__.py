"""Scripts that write source files of the package (run by hand; tests check their output)."""
