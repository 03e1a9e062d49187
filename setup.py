"""Builds the vkgate extension with the project's CMake (python/CMakeLists.txt)
and installs it with its type stubs: pip install --no-build-isolation .

Environment: VKGATE_CMAKE_BUILD_DIR (default build-pip/cmake) keeps the CMake
tree between installs; VKGATE_CMAKE_ARGS adds configure arguments.
"""
import os
import shlex
import shutil
import subprocess
import sys

from setuptools import Extension, setup
from setuptools.command.build_ext import build_ext

ROOT = os.path.dirname(os.path.abspath(__file__))
# setuptools' own trees (build/, *.egg-info) out of the way of the quickstart's build/.
PIP_DIR = os.path.join(ROOT, "build-pip")


class CMakeExtension(Extension):
    def __init__(self, name):
        super().__init__(name, sources=[])


class CMakeBuild(build_ext):
    def build_extension(self, ext):
        build = os.environ.get("VKGATE_CMAKE_BUILD_DIR") or os.path.join(PIP_DIR, "cmake")
        configure = ["cmake", "-S", ROOT, "-B", build, "-DCMAKE_BUILD_TYPE=Release", "-DVKGATE_PYTHON=ON",
                     "-DVKGATE_BUILD_TESTS=OFF", "-DVKGATE_BUILD_TOOLS=OFF",
                     # the interpreter pip runs (a venv's) decides the module's ABI
                     "-DPython_EXECUTABLE=" + sys.executable]
        if shutil.which("ninja") and not os.path.exists(os.path.join(build, "Makefile")):
            configure += ["-G", "Ninja"]
        configure += shlex.split(os.environ.get("VKGATE_CMAKE_ARGS", ""))
        subprocess.check_call(configure)
        subprocess.check_call(["cmake", "--build", build, "--target", "vkgate_python", "--parallel", str(os.cpu_count() or 1)])
        built = [f for f in os.listdir(os.path.join(build, "python")) if f.startswith("vkgate.") and f.endswith(".so")]
        if len(built) != 1:
            raise RuntimeError("expected one vkgate*.so in %s/python, found %s" % (build, built))
        target = self.get_ext_fullpath(ext.name)
        os.makedirs(os.path.dirname(target), exist_ok=True)
        shutil.copyfile(os.path.join(build, "python", built[0]), target)
        shutil.copyfile(os.path.join(ROOT, "python", "vkgate.pyi"), os.path.join(os.path.dirname(target), "vkgate.pyi"))


os.makedirs(PIP_DIR, exist_ok=True)
setup(
    ext_modules=[CMakeExtension("vkgate")],
    cmdclass={"build_ext": CMakeBuild},
    options={"build": {"build_base": os.path.relpath(PIP_DIR, ROOT)},
             "egg_info": {"egg_base": os.path.relpath(PIP_DIR, ROOT)}},
    zip_safe=False,
)
