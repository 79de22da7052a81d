"""MLflow input/output: the store (connection.py, store.py), one run per job (writer.py; spool.py and sync.py
for outages), MLflow's UI conventions (conventions.py, nesting.py, run_note.py). Import the module you need:
importing the package loads nothing, MLflow included."""
