#!/usr/bin/env python3
"""Writes docs/settings.md to stdout: the run-time settings (src/common/settings.h, read from the
compiled modules through lltm_ext.settings()) and the build's knobs (tools/buildsys/config.py's
BUILD_KNOBS), as two tables. Needs the checkout's compiled modules (an in-place or editable
build); run from the repository root:

    python tools/docs/settings_md.py > docs/settings.md

tests/test_settings.py fails when docs/settings.md differs from what this writes.
"""

from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Last on the path: an installed lltm_ext (a wheel under test) comes before the source tree's
# package, whose compiled modules may be built for another torch; tools/ is found either way.
sys.path.append(str(ROOT))

from lltm_ext._settings import markdown  # noqa: E402
from tools.buildsys.config import BUILD_KNOBS  # noqa: E402

if __name__ == "__main__":
    sys.stdout.write(markdown(BUILD_KNOBS))
