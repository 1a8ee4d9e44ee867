"""What the tests share: paths, generated models, real engines, corpora."""
