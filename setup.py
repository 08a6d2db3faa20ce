"""Ships ``recompprof-attach.pth`` into site-packages, so ``RECOMPPROF_ATTACH=1 python train.py`` attaches
with no other set-up; everything else about the package is in pyproject.toml.

A wheel installs the files at the root of its build directory into site-packages, so ``build_py`` copies
the hook there. An editable install (``pip install -e``) builds no such directory: its wheel is made from
what the install step writes, so there the hook goes to the install step's directory instead.
"""

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "recompprof-attach.pth"
SOURCE = os.path.join("recompprof", "_bootstrap", PTH)


class build_py_with_pth(build_py):
    def run(self) -> None:
        super().run()
        target = (
            self.get_finalized_command("install").install_lib
            if self.editable_mode
            else self.build_lib
        )
        self.mkpath(target)
        self.copy_file(SOURCE, os.path.join(target, PTH), preserve_mode=False)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]


setup(cmdclass={"build_py": build_py_with_pth})
