"""Build and development tools of lltm_ext (not part of the installed package)."""
