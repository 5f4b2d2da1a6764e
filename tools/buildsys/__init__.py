"""The build logic behind setup.py: architectures, toolchain, knobs, the build_ext command."""
