"""(ops of this family are defined here)"""
__all__ = []
