"""Stage 1, reading: takes a PyTorch profiler (Kineto) Chrome trace file and gives one columnar `Trace`.

The only place that knows the JSON. `model` holds the event model (`Trace`, `Device`) and `load_trace`;
`reading` turns a file into decoded chunks and `columns` (the normalised event kinds) is the chunks'
transform, both without pandas, so that decoding workers are forked before pandas is imported;
`document` decides how a file is decoded (byte ranges cut by `byteranges`, a gzip stream inflated by
`gzstream`, forked `workers`), `kineto` decodes the format with typed msgspec Structs. `names`
classifies event names (DataLoader, copies, syncs, collectives) and `selection` selects events by kind
once per analysis. Nothing here knows about steps or causes.
"""
