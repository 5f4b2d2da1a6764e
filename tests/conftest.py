"""pytest setup: the `cuda` marker skips cleanly without a GPU (or fails, if a GPU is required)."""

import os

import pytest
import torch


def pytest_collection_modifyitems(config, items):
    if torch.cuda.is_available():
        return
    if os.environ.get("LLTM_EXT_REQUIRE_CUDA") == "1":
        raise pytest.UsageError("LLTM_EXT_REQUIRE_CUDA=1, but torch sees no CUDA GPU.")
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if "cuda" in item.keywords:
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)
