"""The programs in this folder are scripts run by ``test_programs.py``, not test modules."""

collect_ignore_glob = ["p[0-9][0-9]_*.py", "with_keras.py"]
