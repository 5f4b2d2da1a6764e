"""The command line of lltm_ext, ``lltm-ext`` (or ``python -m lltm_ext``): apart from the op API.

* :mod:`lltm_ext.cli.main`: the arguments and the commands ``info`` and ``bench``; ``main`` is the
  ``lltm-ext`` script's entry point.
* :mod:`lltm_ext.cli.bench`: the bench harness: cases, interleaved timing, table, JSON.
* :mod:`lltm_ext.cli.sweep`: ``bench --sweep N``, random shapes and the distribution of ratios.
* :mod:`lltm_ext.cli.plot`: ``bench --plot PATH``, the picture (matplotlib).
* :mod:`lltm_ext.cli.cases`: the bench cases, one module per op module of :mod:`lltm_ext.ops`.

The op API (:mod:`lltm_ext`, :mod:`lltm_ext.ops`) never imports this subpackage
(``tests/test_packaging.py`` checks it).
"""
