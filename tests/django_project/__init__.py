"""A small Django project for the integration tests of pgqueue.contrib.django."""
