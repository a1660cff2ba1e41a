import functools

import pytest

from flextui.graph.library import load_model, model_names
from flextui.machine import cluster_names, load_named_cluster


@functools.cache
def model(name: str, **options):
    return load_model(name, **options)


@functools.cache
def cluster(name: str):
    return load_named_cluster(name)


@pytest.fixture(params=model_names())
def any_model(request):
    return model(request.param)


@pytest.fixture(params=cluster_names())
def any_cluster(request):
    return cluster(request.param)
