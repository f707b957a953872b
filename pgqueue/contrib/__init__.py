"""Integrations with frameworks (each an optional extra; ``import pgqueue`` loads none):
:mod:`.sqlalchemy`, :mod:`.asgi`, :mod:`.django`."""
