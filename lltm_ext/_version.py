"""The base version of lltm_ext (a build appends its local label, e.g. +cu130torch2.13)."""

__version__ = "0.1.0"
