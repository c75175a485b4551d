"""The whole course in a real browser: JupyterLab + headless Chromium (see conftest.py and test_lessons.py).

`lab` starts and stops a throw-away JupyterLab; `notebook` drives one notebook page in it. Both are shared
with `benchmarks/browser.py`.
"""
