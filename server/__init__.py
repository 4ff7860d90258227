"""The HTTP API's parts; api.py assembles them into the FastAPI app (``uvicorn api:app``)."""
