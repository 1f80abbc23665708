"""(kernels of this family are registered here)"""
