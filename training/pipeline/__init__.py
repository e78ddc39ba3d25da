"""The pipeline: stage functions (split, encode, fit head, fit baselines, records, calibrate,
export) and the two jobs built from them, `failfast train` and `failfast demo`."""
