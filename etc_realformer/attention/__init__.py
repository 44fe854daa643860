"""ETC global-local attention: the layer and everything it runs on."""
