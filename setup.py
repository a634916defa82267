"""The optional compiled OTLP decoder, ``ragmon/otlp/_walker.pyx`` (everything else is in
pyproject.toml). ``pip install .`` builds it where a C compiler works; where the build fails,
ragmon installs without it and decodes protobuf in Python (``ragmon.otlp.decode.DECODER``)."""

from setuptools import Extension, setup

try:
    from Cython.Build import cythonize
except ImportError:  # Cython is a build requirement; without it (no build isolation), no extension
    extensions = []
else:
    extensions = cythonize(
        [Extension("ragmon.otlp._walker", ["ragmon/otlp/_walker.pyx"])],
        compiler_directives={"language_level": 3},
    )
    for extension in extensions:
        extension.optional = True  # a failed compile is a warning (cythonize drops the flag)

setup(ext_modules=extensions)
