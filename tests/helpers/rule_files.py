"""Rule files the tests write: `RULE`, a valid user rule (one condition, a saving, a message, the docs),
and `HOSTILE_SKELETON`, the same as a template of its condition, saving and message
(`.format(condition=..., saving=..., message=...)`) for rules built to break the engine."""

import re

RULE = '''
[[rule]]
slug = "my-rule"
title = "Too many kernels"
category = "host"
severity = "low"
condition = "kernels_per_step >= max_kernels"
severity_when = { high = "kernels_per_step >= 10 * max_kernels" }
saving_us = "host_us_per_step / 2"
saving_basis = "half the host time"
evidence = ["kernels_per_step"]
message = "{{ kernels_per_step | num }} kernels per step"
fix = """
Before:
```python
a
```
"""

[rule.thresholds]
max_kernels = 2

[rule.docs]
what = "w"
why = "y"
example = "e"
use_instead = "u"
thresholds = "t"
references = ["https://example.org"]
'''


# RULE as a template of its condition, saving and message
HOSTILE_SKELETON = (re.sub(r"^severity_when = .*\n", "", RULE, flags=re.M)
                    .replace('slug = "my-rule"', 'slug = "evil"').replace('title = "Too many kernels"', 'title = "Evil"')
                    .replace('condition = "kernels_per_step >= max_kernels"', 'condition = "{condition}"')
                    .replace('saving_us = "host_us_per_step / 2"', 'saving_us = "{saving}"')
                    .replace('message = "{{ kernels_per_step | num }} kernels per step"', 'message = """{message}"""'))
