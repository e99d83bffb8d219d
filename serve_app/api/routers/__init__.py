"""The API's routes, one module per resource; each reads the service from app state."""
