"""How a job's Python requirements travel (shared by the client, which packs them, and the
TaskManager's workers, which install them: see taskmanager/python_env.py)."""

REQUIREMENTS_ARTIFACT = "_millstream_python_requirements.zip"  # one artifact: the file and the cache
REQUIREMENTS_FILE = "requirements.txt"  # inside the artifact; the package cache is under "cache/"
