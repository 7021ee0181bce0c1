"""Compute efficiency: takes the cpu ops' recorded inputs (shapes, dtypes, scalar arguments) and
their measured times, gives FLOPs and bytes per op (`flops`, per distinct signature: `shapes`), the
device's peaks (`peaks`: a datasheet table, or the user's / a measured one) and the roofline per op
and per step (`roofline`). docs/efficiency.md."""
