"""Renderers draw traces and simulator steps; they compute nothing the engines own."""
