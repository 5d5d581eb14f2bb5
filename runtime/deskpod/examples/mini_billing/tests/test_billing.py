from billing import apply_discount, total


def test_total_taxes_the_discounted_amount():
    assert total(100.0, 10.0, 0.05) == 94.5


def test_discount_never_goes_below_zero():
    assert apply_discount(5.0, 10.0) == 0.0
