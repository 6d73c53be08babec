"""Services: the use cases, on top of the store ports and embedding registry."""
