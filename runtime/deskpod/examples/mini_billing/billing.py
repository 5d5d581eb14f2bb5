"""Mini billing: what a customer pays for one invoice line.

The example repository of the code-agent task. It has a bug on purpose: the tax is
computed on the discount instead of on the discounted amount, so one of the two
tests in ``tests/`` fails (``assert 90.5 == 94.5``).
"""


def apply_discount(subtotal: float, discount: float) -> float:
    """The subtotal minus a fixed discount, never below zero."""
    return max(subtotal - discount, 0.0)


def total(subtotal: float, discount: float, tax_rate: float) -> float:
    """The discounted amount plus the tax on it, rounded to cents."""
    taxable = apply_discount(subtotal, discount)
    tax = discount * tax_rate
    return round(taxable + tax, 2)
