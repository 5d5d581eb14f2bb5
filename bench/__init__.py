"""deskpod benchmarks, run by hand (``python -m bench``); results go to BENCHMARKS.md."""
