"""ordersim: a research simulator for example-ordering algorithms in (distributed) SGD."""

__version__ = "0.1.0"
