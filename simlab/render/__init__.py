"""Renderers draw traces and simulator steps; they compute nothing the engines own."""
import sys

if "IPython" in sys.modules:  # in a notebook: each figure a cell shows carries its fingerprint (controls.py)
    from .controls import fingerprint_displayed_figures

    fingerprint_displayed_figures()
