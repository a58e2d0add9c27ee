"""TF's strided-slice specs (begin, end, strides and the five masks) made dense: one entry
per output position. The front end (StridedSlice's shape inference and reference kernel,
graphc/ops/array_ops.py) and the compiler's loop rules read the spec through this one
function, so they apply TF's rules alike."""


def dense_spec(rank, begin, end, strides, masks, error):
    """TF's sparse slice spec as one entry per output position:
    ("new",) | ("shrink", dim, begin) | ("slice", dim, begin, end, stride), where a
    masked begin/end is None (Python's "from the edge"). The ellipsis (explicit, or
    implied at the end) stands for as many full slices as the real entries leave."""
    n = len(begin)
    if len(end) != n or len(strides) != n:
        error(f"Expected begin, end, and strides to be 1D equal size tensors, but got "
              f"shapes [{n}], [{len(end)}], and [{len(strides)}] instead.")
    bit = [1 << i for i in range(n)]
    kinds = []
    for i in range(n):
        if masks["ellipsis_mask"] & bit[i]:
            kinds.append("ellipsis")
        elif masks["new_axis_mask"] & bit[i]:
            kinds.append("new")
        elif masks["shrink_axis_mask"] & bit[i]:
            kinds.append("shrink")
        else:
            kinds.append("slice")
    if kinds.count("ellipsis") > 1:
        error("Multiple ellipses in slice spec not allowed")
    if "ellipsis" not in kinds:
        kinds.append("ellipsis")
    real = sum(k in ("shrink", "slice") for k in kinds)
    if real > rank:
        error(f"Index out of range using input dim {rank}; input has only {rank} dims")
    entries, dim = [], 0
    for i, kind in enumerate(kinds):
        if kind == "ellipsis":
            for _ in range(rank - real):
                entries.append(("slice", dim, None, None, 1))
                dim += 1
        elif kind == "new":
            entries.append(("new",))
        elif kind == "shrink":
            entries.append(("shrink", dim, begin[i]))
            dim += 1
        else:
            b = None if masks["begin_mask"] & bit[i] else begin[i]
            e = None if masks["end_mask"] & bit[i] else end[i]
            if strides[i] == 0:
                error(f"strides[{i}] must be non-zero")
            entries.append(("slice", dim, b, e, strides[i]))
            dim += 1
    return entries
