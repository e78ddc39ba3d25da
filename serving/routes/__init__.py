"""The HTTP service's routes, one module per resource, over serving.state.AppState."""
