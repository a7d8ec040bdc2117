"""The cpu target's OpenMP wait default (targets/cpu/openmp.py): a short spin, unless the user chose."""

import os
import subprocess
import sys

from fusegraph.targets.cpu.openmp import SPINCOUNT, set_wait_defaults


def test_the_default_is_set_only_where_the_user_chose_no_policy():
    env = {}
    assert set_wait_defaults(env) and env == {"GOMP_SPINCOUNT": SPINCOUNT}
    for chosen in ({"OMP_WAIT_POLICY": "PASSIVE"}, {"GOMP_SPINCOUNT": "300000"}):
        env = dict(chosen)
        assert not set_wait_defaults(env) and env == chosen


def test_importing_the_target_sets_it_before_libgomp_loads():
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    code = ("import os, fusegraph; fusegraph.get_target('cpu'); "
            "maps = open('/proc/self/maps').read(); "
            "print(os.environ.get('GOMP_SPINCOUNT'), 'libgomp' in maps)")
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True).stdout
    assert out.split()[0] == SPINCOUNT
