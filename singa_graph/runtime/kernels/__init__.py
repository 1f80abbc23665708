"""Kernel tables, one subpackage per device kind; importing one registers its kernels."""
