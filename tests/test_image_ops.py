"""tf.image on numeric tensors (graphc/ops/image_ops.py): each function against a NumPy
reference written here from TF1's documented semantics and its kernels' float32 arithmetic
(the legacy `i * scale` source coordinates of resize_*), on every backend, rank 3 and 4,
float32/float64 and integer images, odd and zero sizes; gradients of the resizes by
central differences in float64."""
import numpy as np
import pytest

import graphc as tf
from tests.conftest import BACKENDS
from tests.gradcheck import check_gradients

pytestmark = pytest.mark.parametrize("backend", BACKENDS)
rng = np.random.default_rng(11)


def run(fetches, feeds=None):
    with tf.Session() as sess:
        return sess.run(fetches, feeds)


def image(shape, dtype=np.float32):
    if np.dtype(dtype).kind in "iu":
        info = np.iinfo(dtype)
        return rng.integers(max(info.min, -1000), min(info.max, 1000), size=shape,
                            endpoint=True).astype(dtype)
    return rng.uniform(-4, 4, size=shape).astype(dtype)


# ------------------------------------------------------------------ NumPy references
def np_scale(in_size, out_size, align):
    if align and in_size > 1 and out_size > 1:
        return np.float32(in_size - 1) / np.float32(out_size - 1)
    return np.float32(in_size) / np.float32(out_size)


def np_source(i, scale, half_pixel, shift):
    if half_pixel:
        return (np.float32(i) + np.float32(0.5)) * scale - np.float32(shift)
    return np.float32(i) * scale


def np_bilinear(img, nh, nw, align=False, half=False):
    img = img.astype(np.float32)
    n, h, w, c = img.shape
    sy, sx = np_scale(h, nh, align), np_scale(w, nw, align)
    out = np.zeros((n, nh, nw, c), np.float32)
    for y in range(nh):
        fy = np_source(y, sy, half, 0.5)
        y0, y1 = max(int(np.floor(fy)), 0), min(int(np.ceil(fy)), h - 1)
        ly = np.float32(fy - np.floor(fy))
        for x in range(nw):
            fx = np_source(x, sx, half, 0.5)
            x0, x1 = max(int(np.floor(fx)), 0), min(int(np.ceil(fx)), w - 1)
            lx = np.float32(fx - np.floor(fx))
            top = img[:, y0, x0] + (img[:, y0, x1] - img[:, y0, x0]) * lx
            bottom = img[:, y1, x0] + (img[:, y1, x1] - img[:, y1, x0]) * lx
            out[:, y, x] = top + (bottom - top) * ly
    return out


def np_nearest(img, nh, nw, align=False, half=False):
    def index(i, in_size, out_size):
        f = np_source(i, np_scale(in_size, out_size, align), half, 0.0)
        j = int(np.floor(f + np.float32(0.5))) if align and f - np.floor(f) >= 0.5 else \
            int(np.floor(f))
        return min(max(j, 0), in_size - 1)
    _, h, w, _ = img.shape
    rows = [index(y, h, nh) for y in range(nh)]
    cols = [index(x, w, nw) for x in range(nw)]
    return img[:, rows][:, :, cols]


def np_area(img, nh, nw, align=False):
    img = img.astype(np.float32)
    n, h, w, c = img.shape
    sy, sx = np_scale(h, nh, align), np_scale(w, nw, align)

    def cells(i, scale, size):
        lo, hi = np.float32(i) * scale, np.float32(i + 1) * scale
        for j in range(int(np.floor(lo)), int(np.ceil(hi))):
            if j < lo:
                wgt = scale if j + 1 > hi else np.float32(j + 1) - lo
            else:
                wgt = hi - np.float32(j) if j + 1 > hi else np.float32(1)
            yield min(j, size - 1), np.float32(wgt)

    inverse = np.float32(1.0 / float(np.float32(sy * sx)))
    out = np.zeros((n, nh, nw, c), np.float32)
    for y in range(nh):
        for x in range(nw):
            total = np.zeros((n, c), np.float32)
            for j, wy in cells(y, sy, h):
                row = None
                for i, wx in cells(x, sx, w):
                    term = img[:, j, i] * wx
                    row = term if row is None else row + term
                total = total + row * wy
            out[:, y, x] = total * inverse
    return out


def np_cubic_weights(delta):
    """Keys' cubic (a = -0.75) at the 4 taps around a point `delta` past the second, read
    from a 1024-step table of float32 values as TF's legacy kernel does."""
    a = -0.75

    def near(t):
        return np.float32(((a + 2) * t - (a + 3)) * t * t + 1)

    def far(t):
        return np.float32(((a * t - 5 * a) * t + 8 * a) * t - 4 * a)

    k = int(np.rint(delta * np.float32(1024)))
    t, u = k / 1024.0, (1024 - k) / 1024.0
    return far(t + 1), near(t), near(u), far(u + 1)


def np_bicubic(img, nh, nw, align=False):
    img = img.astype(np.float32)
    n, h, w, c = img.shape

    def taps(i, in_size, out_size):
        f = np.float32(i) * np_scale(in_size, out_size, align)
        base = int(np.floor(f))
        weights = np_cubic_weights(np.float32(f - np.float32(base)))
        return [(min(max(base + k - 1, 0), in_size - 1), weights[k]) for k in range(4)]

    def combine(values, weights):
        return ((values[0] * weights[0] + values[1] * weights[1]) + values[2] * weights[2]) \
            + values[3] * weights[3]

    out = np.zeros((n, nh, nw, c), np.float32)
    for y in range(nh):
        ty = taps(y, h, nh)
        for x in range(nw):
            tx = taps(x, w, nw)
            columns = [combine([img[:, j, i] for j, _ in ty], [wy for _, wy in ty])
                       for i, _ in tx]
            out[:, y, x] = combine(columns, [wx for _, wx in tx])
    return out


# ------------------------------------------------------------------ resizing
SIZES = [((5, 7), (3, 4)), ((4, 4), (8, 11)), ((1, 3), (7, 3)), ((9, 2), (1, 1)),
         ((3, 5), (13, 5))]
RESIZERS = {"bilinear": (tf.image.resize_bilinear, np_bilinear),
            "nearest": (tf.image.resize_nearest_neighbor, np_nearest),
            "area": (tf.image.resize_area, np_area),
            "bicubic": (tf.image.resize_bicubic, np_bicubic)}


@pytest.mark.parametrize("method", sorted(RESIZERS))
@pytest.mark.parametrize("align", [False, True])
def test_resize_ops_match_numpy(backend, method, align):
    op, reference = RESIZERS[method]
    for (h, w), (nh, nw) in SIZES:
        x = image((2, h, w, 3))
        ph = tf.placeholder(tf.float32, [None, h, w, 3])
        out = run(op(ph, [nh, nw], align_corners=align), {ph: x})
        assert out.dtype == np.float32 and out.shape == (2, nh, nw, 3)
        np.testing.assert_allclose(out, reference(x, nh, nw, align), rtol=1e-6, atol=1e-6,
                                   err_msg=f"{method} {h}x{w} -> {nh}x{nw}")


@pytest.mark.parametrize("method", ["bilinear", "nearest"])
def test_resize_half_pixel_centers(backend, method):
    op, reference = RESIZERS[method]
    for (h, w), (nh, nw) in SIZES:
        x = image((1, h, w, 2))
        out = run(op(tf.constant(x), [nh, nw], half_pixel_centers=True))
        np.testing.assert_allclose(out, reference(x, nh, nw, half=True), rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("dtype", [np.float64, np.uint8, np.int32])
def test_resize_dtypes(backend, dtype):
    """bilinear, area and bicubic read every dtype as float32 and answer float32; nearest
    keeps the dtype (TF1's kernels)."""
    x = image((2, 5, 3, 2), dtype)
    ph = tf.placeholder(tf.as_dtype(dtype), [2, 5, 3, 2])
    outs = run({m: RESIZERS[m][0](ph, [4, 7]) for m in RESIZERS}, {ph: x})
    for m, (_, reference) in RESIZERS.items():
        want = reference(x, 4, 7)
        assert outs[m].dtype == want.dtype == (dtype if m == "nearest" else np.float32), m
        np.testing.assert_allclose(outs[m], want, rtol=1e-6, atol=1e-5, err_msg=m)


def test_resize_images_methods_ranks_and_batch(backend):
    x3 = image((5, 6, 3))
    ph = tf.placeholder(tf.float32, [None, 5, 6, 3])
    ph3 = tf.placeholder(tf.float32, [5, 6, 3])
    M = tf.image.ResizeMethod
    fetches = {
        "default": tf.image.resize_images(ph, [3, 8]),
        "nearest": tf.image.resize_images(ph, (3, 8), method=M.NEAREST_NEIGHBOR),
        "area": tf.image.resize_images(ph, [3, 8], method=M.AREA, align_corners=True),
        "bicubic": tf.image.resize_images(ph, [3, 8], method="bicubic"),
        "rank3": tf.image.resize_images(ph3, tf.constant([3, 8])),
    }
    assert fetches["rank3"].shape.as_list() == [3, 8, 3]
    assert fetches["default"].shape.as_list() == [None, 3, 8, 3]
    out = run(fetches, {ph: x3[None], ph3: x3})
    np.testing.assert_allclose(out["default"], np_bilinear(x3[None], 3, 8), 1e-6, 1e-6)
    np.testing.assert_array_equal(out["nearest"], np_nearest(x3[None], 3, 8))
    np.testing.assert_allclose(out["area"], np_area(x3[None], 3, 8, True), 1e-6, 1e-6)
    np.testing.assert_allclose(out["bicubic"], np_bicubic(x3[None], 3, 8), 1e-6, 1e-6)
    np.testing.assert_allclose(out["rank3"], np_bilinear(x3[None], 3, 8)[0], 1e-6, 1e-6)


def test_resize_images_same_size_returns_the_input(backend):
    """TF1 skips the resize when the size is already right: the dtype stays too."""
    x = image((4, 5, 3), np.uint8)
    out = tf.image.resize_images(tf.constant(x), [4, 5])
    assert out.dtype == tf.uint8
    np.testing.assert_array_equal(run(out), x)


def test_resize_images_preserve_aspect_ratio(backend):
    x = image((1, 4, 8, 1))
    ph = tf.placeholder(tf.float32, [None, 4, 8, 1])
    out = tf.image.resize_images(ph, [6, 6], preserve_aspect_ratio=True)
    assert out.shape.as_list() == [None, 3, 6, 1]
    got = run(out, {ph: x})
    assert got.shape == (1, 3, 6, 1)
    np.testing.assert_allclose(got, np_bilinear(x, 3, 6), 1e-6, 1e-6)
    size = tf.placeholder(tf.int32, [2])
    dynamic = tf.image.resize_images(ph, size, preserve_aspect_ratio=True)
    np.testing.assert_allclose(run(dynamic, {ph: x, size: [2, 100]}), np_bilinear(x, 2, 4),
                               1e-6, 1e-6)


def test_resize_size_known_only_at_run_time(backend):
    x = image((2, 5, 7, 3))
    ph = tf.placeholder(tf.float32, [None, None, None, 3])
    size = tf.placeholder(tf.int32, [2])
    fetches = [tf.image.resize_bilinear(ph, size), tf.image.resize_nearest_neighbor(ph, size),
               tf.image.resize_bilinear(ph, size, align_corners=True)]
    for nh, nw in [(3, 4), (9, 1), (5, 7)]:
        bl, nn, al = run(fetches, {ph: x, size: [nh, nw]})
        np.testing.assert_allclose(bl, np_bilinear(x, nh, nw), 1e-6, 1e-6)
        np.testing.assert_array_equal(nn, np_nearest(x, nh, nw))
        np.testing.assert_allclose(al, np_bilinear(x, nh, nw, True), 1e-6, 1e-6)


def test_resize_zero_batch_and_channels(backend):
    ph = tf.placeholder(tf.float32, [None, 3, 4, None])
    for shape in [(0, 3, 4, 2), (2, 3, 4, 0)]:
        outs = run([RESIZERS[m][0](ph, [5, 2]) for m in sorted(RESIZERS)],
                   {ph: np.zeros(shape, np.float32)})
        for out in outs:
            assert out.shape == (shape[0], 5, 2, shape[3])


@pytest.mark.parametrize("align", [False, True])
def test_resize_gradients(backend, align):
    """Both resizes are linear in the image, so central differences are exact at any step:
    a step of 1 keeps the float32 rounding of the forward pass out of the comparison."""
    for (h, w), (nh, nw) in [((3, 4), (5, 3)), ((4, 5), (2, 7))]:
        x = rng.standard_normal((2, h, w, 2))
        for op in (tf.image.resize_bilinear, tf.image.resize_nearest_neighbor):
            check_gradients(lambda t, op=op: op(t, [nh, nw], align_corners=align), [x],
                            eps=1.0, rtol=1e-5, atol=1e-5)


def test_resize_nearest_gradient_keeps_dtype(backend):
    x = tf.placeholder(tf.float64, [1, 3, 3, 1])
    g = tf.gradients(tf.reduce_sum(tf.image.resize_nearest_neighbor(x, [6, 6])), x)[0]
    out = run(g, {x: np.zeros((1, 3, 3, 1))})
    assert out.dtype == np.float64
    np.testing.assert_array_equal(out, np.full((1, 3, 3, 1), 4.0))


def test_resize_errors_name_the_function_and_line(backend):
    x4 = tf.placeholder(tf.float32, [1, 4, 4, 1])
    with pytest.raises(ValueError, match=r"resize_images.*3 or 4 dimensions"):
        tf.image.resize_images(tf.placeholder(tf.float32, [4, 4]), [2, 2])
    with pytest.raises(ValueError, match=r"resize_bilinear: input must be 4-dimensional"):
        tf.image.resize_bilinear(tf.placeholder(tf.float32, [4, 4, 1]), [2, 2])
    with pytest.raises(ValueError, match=r"2 elements[\s\S]*test_image_ops.py"):
        tf.image.resize_images(x4, [2, 2, 2])
    with pytest.raises(ValueError, match="output dimensions must be positive"):
        tf.image.resize_nearest_neighbor(x4, [0, 3])
    with pytest.raises(ValueError, match="non-zero size"):
        tf.image.resize_bilinear(tf.placeholder(tf.float32, [1, 0, 4, 1]), [2, 2])
    with pytest.raises(ValueError, match="align_corners must be False"):
        tf.image.resize_bilinear(x4, [2, 2], align_corners=True, half_pixel_centers=True)
    with pytest.raises(ValueError, match="Resize method is not implemented"):
        tf.image.resize_images(x4, [2, 2], method=7)
    with pytest.raises(ValueError, match=r"resize_area.*known"):
        tf.image.resize_area(tf.placeholder(tf.float32, [1, None, 4, 1]), [2, 2])


# ------------------------------------------------------------------ flips and rotations
def test_flips_transpose_rot90(backend):
    x = image((2, 3, 5, 2))
    ph = tf.placeholder(tf.float32, [None, 3, 5, 2])
    ph3 = tf.placeholder(tf.float32, [3, 5, 2])
    k = tf.placeholder(tf.int32, [])
    fetches = {"lr": tf.image.flip_left_right(ph), "ud": tf.image.flip_up_down(ph),
               "lr3": tf.image.flip_left_right(ph3), "ud3": tf.image.flip_up_down(ph3),
               "t": tf.image.transpose_image(ph), "t3": tf.image.transpose_image(ph3),
               "r1": tf.image.rot90(ph), "r2": tf.image.rot90(ph3, 2),
               "r3": tf.image.rot90(ph, k=-1), "rk": tf.image.rot90(ph, k)}
    for kv in (0, 1, 2, 3, 5):
        out = run(fetches, {ph: x, ph3: x[0], k: kv})
        np.testing.assert_array_equal(out["lr"], x[:, :, ::-1])
        np.testing.assert_array_equal(out["ud"], x[:, ::-1])
        np.testing.assert_array_equal(out["lr3"], x[0, :, ::-1])
        np.testing.assert_array_equal(out["ud3"], x[0, ::-1])
        np.testing.assert_array_equal(out["t"], x.transpose(0, 2, 1, 3))
        np.testing.assert_array_equal(out["t3"], x[0].transpose(1, 0, 2))
        np.testing.assert_array_equal(out["r1"], np.rot90(x, 1, axes=(1, 2)))
        np.testing.assert_array_equal(out["r2"], np.rot90(x[0], 2, axes=(0, 1)))
        np.testing.assert_array_equal(out["r3"], np.rot90(x, 3, axes=(1, 2)))
        np.testing.assert_array_equal(out["rk"], np.rot90(x, kv, axes=(1, 2)))


def test_reverse_and_its_gradient(backend):
    x = image((3, 4, 5), np.float64)
    out = run(tf.reverse(tf.constant(x), [0, -1]))
    np.testing.assert_array_equal(out, x[::-1, :, ::-1])
    check_gradients(lambda t: tf.reverse(t, [1]) * t, [x])
    with pytest.raises(ValueError, match="more than once"):
        tf.reverse(tf.constant(x), [0, -3])


def test_random_flips_are_seeded_and_flip_whole_images(backend):
    x = image((16, 3, 4, 1))
    ph = tf.placeholder(tf.float32, [None, 3, 4, 1])
    tf.set_random_seed(3)
    lr, ud = tf.image.random_flip_left_right(ph), tf.image.random_flip_up_down(ph, seed=5)
    one = tf.image.random_flip_left_right(ph[0], seed=1)
    firsts = []
    for _ in range(2):  # a new session with the same seeds draws the same flips
        with tf.Session() as sess:
            runs = [sess.run([lr, ud, one], {ph: x}) for _ in range(6)]
        firsts.append(runs)
        flipped = []
        for out_lr, out_ud, out_one in runs:
            for b in range(16):
                is_lr = np.array_equal(out_lr[b], x[b, :, ::-1])
                assert is_lr or np.array_equal(out_lr[b], x[b])
                assert np.array_equal(out_ud[b], x[b, ::-1]) or np.array_equal(out_ud[b], x[b])
                flipped.append(is_lr)
            assert np.array_equal(out_one, x[0, :, ::-1]) or np.array_equal(out_one, x[0])
        assert 0 < sum(flipped) < len(flipped)
    for a, b in zip(firsts[0], firsts[1]):
        for u, v in zip(a, b):
            np.testing.assert_array_equal(u, v)


# ------------------------------------------------------------------ crops and pads
def test_crop_and_pad_to_bounding_box(backend):
    x = image((2, 5, 7, 3), np.int32)
    ph = tf.placeholder(tf.int32, [None, 5, 7, 3])
    off = tf.placeholder(tf.int32, [])
    fetches = {"crop": tf.image.crop_to_bounding_box(ph, 1, 2, 3, 4),
               "crop3": tf.image.crop_to_bounding_box(ph[0], 0, 0, 5, 7),
               "crop_dyn": tf.image.crop_to_bounding_box(ph, off, off, 2, 3),
               "pad": tf.image.pad_to_bounding_box(ph, 2, 1, 8, 9),
               "pad3": tf.image.pad_to_bounding_box(ph[1], off, 0, 7, 7)}
    assert fetches["crop"].shape.as_list() == [None, 3, 4, 3]
    assert fetches["pad3"].shape.as_list() == [7, 7, 3]
    out = run(fetches, {ph: x, off: 2})
    np.testing.assert_array_equal(out["crop"], x[:, 1:4, 2:6])
    np.testing.assert_array_equal(out["crop3"], x[0])
    np.testing.assert_array_equal(out["crop_dyn"], x[:, 2:4, 2:5])
    want = np.zeros((2, 8, 9, 3), np.int32)
    want[:, 2:7, 1:8] = x
    np.testing.assert_array_equal(out["pad"], want)
    want3 = np.zeros((7, 7, 3), np.int32)
    want3[2:7] = x[1]
    np.testing.assert_array_equal(out["pad3"], want3)


def test_crop_and_pad_errors(backend):
    ph = tf.placeholder(tf.float32, [4, 4, 1])
    with pytest.raises(ValueError, match=r"crop_to_bounding_box: width must be >= target "
                                         r"\+ offset[\s\S]*test_image_ops.py"):
        tf.image.crop_to_bounding_box(ph, 0, 1, 2, 4)
    with pytest.raises(ValueError, match="offset_height must be >= 0"):
        tf.image.crop_to_bounding_box(ph, -1, 0, 2, 2)
    with pytest.raises(ValueError, match="target_width must be > 0"):
        tf.image.crop_to_bounding_box(ph, 0, 0, 2, 0)
    with pytest.raises(ValueError, match="pad_to_bounding_box: height must be <= target"):
        tf.image.pad_to_bounding_box(ph, 1, 0, 4, 6)
    with pytest.raises(ValueError, match=r"3 or 4 dimensions"):
        tf.image.pad_to_bounding_box(tf.placeholder(tf.float32, [4, 4]), 0, 0, 5, 5)
    off = tf.placeholder(tf.int32, [])
    crop = tf.image.crop_to_bounding_box(ph, off, 0, 2, 2)
    with pytest.raises(tf.errors.InvalidArgumentError, match="height must be >= target"):
        run(crop, {ph: np.zeros((4, 4, 1), np.float32), off: 3})


def test_resize_image_with_crop_or_pad(backend):
    x = image((2, 5, 4, 1))
    ph = tf.placeholder(tf.float32, [None, 5, 4, 1])
    dyn = tf.placeholder(tf.float32, [None, None, None, 1])
    targets = [(3, 8), (8, 2), (5, 4), (1, 1), (6, 5)]

    def reference(img, th, tw):
        h, w = img.shape[1:3]
        out = np.zeros((img.shape[0], th, tw, 1), img.dtype)
        ch, cw = max((h - th) // 2, 0), max((w - tw) // 2, 0)
        ph_, pw = max((th - h) // 2, 0), max((tw - w) // 2, 0)
        mh, mw = min(h, th), min(w, tw)
        out[:, ph_:ph_ + mh, pw:pw + mw] = img[:, ch:ch + mh, cw:cw + mw]
        return out

    fetches = [tf.image.resize_image_with_crop_or_pad(ph, th, tw) for th, tw in targets]
    fetches += [tf.image.resize_image_with_crop_or_pad(dyn, th, tw) for th, tw in targets]
    fetches.append(tf.image.resize_image_with_crop_or_pad(ph[0], 3, 6))
    outs = run(fetches, {ph: x, dyn: x})
    for out, (th, tw) in zip(outs, targets + targets):
        np.testing.assert_array_equal(out, reference(x, th, tw))
    np.testing.assert_array_equal(outs[-1], reference(x[:1], 3, 6)[0])


def test_central_crop(backend):
    x = image((2, 9, 7, 2))
    ph = tf.placeholder(tf.float32, [None, 9, 7, 2])
    dyn = tf.placeholder(tf.float32, [None, None, None, 2])
    for fraction in (0.5, 0.33, 1.0, 0.9):
        bh = int((9.0 - 9.0 * fraction) / 2)
        bw = int((7.0 - 7.0 * fraction) / 2)
        want = x[:, bh:9 - bh, bw:7 - bw]
        a, b, c = run([tf.image.central_crop(ph, fraction), tf.image.central_crop(dyn, fraction),
                       tf.image.central_crop(ph[1], fraction)], {ph: x, dyn: x})
        np.testing.assert_array_equal(a, want)
        np.testing.assert_array_equal(b, want)
        np.testing.assert_array_equal(c, want[1])
    with pytest.raises(ValueError, match=r"central_crop: central_fraction must be within"):
        tf.image.central_crop(ph, 0.0)


def test_random_crop(backend):
    x = np.arange(2 * 6 * 5 * 3, dtype=np.float32).reshape(2, 6, 5, 3)
    ph = tf.placeholder(tf.float32, [None, 6, 5, 3])
    crop = tf.random_crop(ph, [2, 3, 4, 3], seed=7)
    assert tf.image.random_crop is tf.random_crop
    seen = set()
    with tf.Session() as sess:
        for _ in range(12):
            out = sess.run(crop, {ph: x})
            y0, x0 = int(out[0, 0, 0, 0]) // 15 % 6, int(out[0, 0, 0, 0]) // 3 % 5
            np.testing.assert_array_equal(out, x[:, y0:y0 + 3, x0:x0 + 4])
            seen.add((y0, x0))
    assert len(seen) > 1
    with pytest.raises(ValueError, match="Need value.shape >= size"):
        tf.random_crop(ph, [2, 7, 4, 3])
    dyn = tf.placeholder(tf.float32, [None, None])
    with pytest.raises(tf.errors.InvalidArgumentError, match="Need value.shape >= size"):
        run(tf.random_crop(dyn, [3, 3]), {dyn: np.zeros((2, 5), np.float32)})


# ------------------------------------------------------------------ dtypes and colour
CONVERSIONS = [(np.uint8, np.float32), (np.uint8, np.float64), (np.float32, np.uint8),
               (np.float64, np.int16), (np.uint8, np.int32), (np.int32, np.uint8),
               (np.int16, np.int8), (np.int8, np.int16), (np.float32, np.float64),
               (np.int64, np.int32)]


def np_convert(x, dtype, saturate=False):
    """TF1's convert_image_dtype semantics, stated on NumPy values."""
    src, dst = np.dtype(x.dtype), np.dtype(dtype)
    if src == dst:
        return x
    if src.kind in "iu" and dst.kind in "iu":
        smax, dmax = int(np.iinfo(src).max), int(np.iinfo(dst).max)
        if smax > dmax:
            scaled = x.astype(np.int64) // ((smax + 1) // (dmax + 1))
            if saturate:
                scaled = np.clip(scaled, np.iinfo(dst).min, dmax)
            return scaled.astype(dst)
        return x.astype(dst) * dst.type((dmax + 1) // (smax + 1))
    if src.kind == "f" and dst.kind == "f":
        return x.astype(dst)
    if src.kind in "iu":
        return x.astype(dst) * dst.type(1.0 / np.iinfo(src).max)
    scaled = x * src.type(np.iinfo(dst).max + 0.5)
    if saturate:
        info = np.iinfo(dst)
        scaled = np.clip(scaled, info.min, info.max)
    return np.trunc(scaled).astype(dst)


@pytest.mark.parametrize("src,dst", CONVERSIONS)
def test_convert_image_dtype(backend, src, dst):
    if np.dtype(src).kind == "f":
        x = rng.uniform(-0.2, 1.0, size=(3, 5, 3)).astype(src)
    else:
        x = image((3, 5, 3), src)
        x.flat[:2] = [np.iinfo(src).max, np.iinfo(src).min]
    ph = tf.placeholder(tf.as_dtype(src), x.shape)
    outs = run([tf.image.convert_image_dtype(ph, dst),
                tf.image.convert_image_dtype(ph, dst, saturate=True)], {ph: x})
    for out, saturate in zip(outs, (False, True)):
        assert out.dtype == dst
        if np.dtype(src).kind == "f" and np.dtype(dst).kind in "iu" and not saturate:
            # an unsaturated out-of-range cast is undefined in TF: compare the in-range part
            keep = (x >= 0) & (x <= 1)
            np.testing.assert_array_equal(out[keep], np_convert(x, dst)[keep])
        else:
            np.testing.assert_allclose(out, np_convert(x, dst, saturate), rtol=1e-7)


def test_saturate_cast(backend):
    x = np.array([-300.7, -1.5, 0.4, 254.9, 1e10, 3e9, -3e9], np.float32)
    ph = tf.placeholder(tf.float32, [7])
    u8, i32 = run([tf.saturate_cast(ph, tf.uint8), tf.saturate_cast(ph, tf.int32)], {ph: x})
    np.testing.assert_array_equal(u8, [0, 0, 0, 254, 255, 255, 0])
    np.testing.assert_array_equal(i32, [-300, -1, 0, 254, 2147483520, 2147483520,
                                        -2147483648])


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8])
def test_grayscale(backend, dtype):
    x = rng.uniform(0, 1, size=(2, 3, 4, 3)).astype(dtype) if dtype != np.uint8 else \
        image((2, 3, 4, 3), np.uint8)
    ph = tf.placeholder(tf.as_dtype(dtype), [None, 3, 4, 3])
    gray, gray3, rgb = run([tf.image.rgb_to_grayscale(ph), tf.image.rgb_to_grayscale(ph[0]),
                            tf.image.grayscale_to_rgb(tf.image.rgb_to_grayscale(ph))], {ph: x})
    flt = np_convert(x, np.float32)
    weighted = ((flt[..., 0] * np.float32(0.2989) + flt[..., 1] * np.float32(0.5870))
                + flt[..., 2] * np.float32(0.1140))
    want = np_convert(weighted[..., None], dtype)
    assert gray.dtype == dtype and gray.shape == (2, 3, 4, 1)
    np.testing.assert_allclose(gray, want, rtol=1e-6, atol=1 if dtype == np.uint8 else 1e-6)
    np.testing.assert_array_equal(gray3, gray[0])
    np.testing.assert_array_equal(rgb, np.repeat(gray, 3, axis=-1))
    with pytest.raises(ValueError, match="grayscale_to_rgb"):
        tf.image.grayscale_to_rgb(ph)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_adjust_brightness_and_contrast(backend, dtype):
    x = rng.uniform(0, 1, size=(2, 4, 5, 3)).astype(np.float32) if dtype == np.float32 else \
        image((2, 4, 5, 3), np.uint8)
    ph = tf.placeholder(tf.as_dtype(dtype), [None, 4, 5, 3])
    bright, contrast, contrast3 = run([tf.image.adjust_brightness(ph, 0.3),
                                       tf.image.adjust_contrast(ph, 1.7),
                                       tf.image.adjust_contrast(ph[1], 0.4)], {ph: x})
    flt = np_convert(x, np.float32)
    mean = flt.mean(axis=(1, 2), keepdims=True)
    tol = dict(rtol=1e-6, atol=1 if dtype == np.uint8 else 1e-6)
    np.testing.assert_allclose(bright, np_convert(flt + np.float32(0.3), dtype, True), **tol)
    np.testing.assert_allclose(contrast, np_convert((flt - mean) * np.float32(1.7) + mean,
                                                    dtype, True), **tol)
    np.testing.assert_allclose(contrast3, np_convert((flt[1] - mean[1]) * np.float32(0.4)
                                                     + mean[1], dtype, True), **tol)
    assert bright.dtype == contrast.dtype == dtype


def test_random_brightness_and_contrast(backend):
    x = rng.uniform(0, 1, size=(4, 5, 3)).astype(np.float32)
    ph = tf.placeholder(tf.float32, [4, 5, 3])
    bright = tf.image.random_brightness(ph, 0.25, seed=1)
    contrast = tf.image.random_contrast(ph, 0.5, 1.5, seed=2)
    mean = x.mean(axis=(0, 1))
    with tf.Session() as sess:
        for _ in range(5):
            b, c = sess.run([bright, contrast], {ph: x})
            delta = b - x
            assert np.ptp(delta) < 1e-6 and -0.25 <= delta.flat[0] < 0.25
            factor = (c - mean) / (x - mean)
            assert np.ptp(factor) < 1e-3 and 0.5 <= factor.flat[0] < 1.5
    with pytest.raises(ValueError, match="upper must be > lower"):
        tf.image.random_contrast(ph, 1.0, 0.5)
    with pytest.raises(ValueError, match="max_delta must be non-negative"):
        tf.image.random_brightness(ph, -1.0)


@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.uint8])
def test_per_image_standardization(backend, dtype):
    x = image((3, 4, 5, 2), dtype) if dtype == np.uint8 else \
        rng.uniform(-3, 5, size=(3, 4, 5, 2)).astype(dtype)
    x[1] = x[1].flat[0]  # a uniform image: stddev 0, divided by 1 / sqrt(N) instead
    ph = tf.placeholder(tf.as_dtype(dtype), [None, 4, 5, 2])
    out, out3 = run([tf.image.per_image_standardization(ph),
                     tf.image.per_image_standardization(ph[2])], {ph: x})
    flt = x.astype(np.float64)
    mean = flt.mean(axis=(1, 2, 3), keepdims=True)
    std = np.sqrt(((flt - mean) ** 2).mean(axis=(1, 2, 3), keepdims=True))
    want = (flt - mean) / np.maximum(std, 1 / np.sqrt(40))
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, want, rtol=2e-5, atol=2e-5)
    np.testing.assert_allclose(out3, want[2], rtol=2e-5, atol=2e-5)


def test_total_variation(backend):
    x = image((2, 4, 5, 3), np.float64)
    ph = tf.placeholder(tf.float64, [None, 4, 5, 3])
    batch, single = run([tf.image.total_variation(ph), tf.image.total_variation(ph[0])],
                        {ph: x})
    want = (np.abs(np.diff(x, axis=1)).sum(axis=(1, 2, 3))
            + np.abs(np.diff(x, axis=2)).sum(axis=(1, 2, 3)))
    np.testing.assert_allclose(batch, want, rtol=1e-12)
    np.testing.assert_allclose(single, want[0], rtol=1e-12)
    with pytest.raises(ValueError, match="total_variation"):
        tf.image.total_variation(tf.placeholder(tf.float32, [3, 3]))


# ------------------------------------------------------------------ HSV
def np_hsv(rgb):
    import colorsys
    flat = rgb.reshape(-1, 3).astype(np.float64)
    return np.array([colorsys.rgb_to_hsv(*p) for p in flat]).reshape(rgb.shape)


def np_rgb(hsv):
    import colorsys
    flat = hsv.reshape(-1, 3).astype(np.float64)
    return np.array([colorsys.hsv_to_rgb(*p) for p in flat]).reshape(hsv.shape)


def colour_image(shape, dtype=np.float32):
    x = rng.uniform(0, 1, size=shape).astype(dtype)
    flat = x.reshape(-1, 3)
    flat[:6] = [[0.5, 0.5, 0.5], [0, 0, 0], [1, 0, 0], [0.2, 0.7, 0.7], [0.9, 0.3, 0.9],
                [1, 1, 0]]  # grey, black, a primary, ties between the largest channels
    return x


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
def test_rgb_hsv_round_trip(backend, dtype):
    x = colour_image((2, 5, 7, 3), dtype)
    ph = tf.placeholder(tf.as_dtype(dtype), [None, 5, 7, 3])
    hsv, back, hsv3 = run([tf.image.rgb_to_hsv(ph), tf.image.hsv_to_rgb(tf.image.rgb_to_hsv(ph)),
                           tf.image.rgb_to_hsv(ph[0])], {ph: x})
    tol = dict(rtol=1e-6, atol=1e-6) if dtype == np.float32 else dict(rtol=1e-12, atol=1e-12)
    assert hsv.dtype == dtype
    np.testing.assert_allclose(hsv, np_hsv(x), **tol)
    np.testing.assert_allclose(hsv3, np_hsv(x[0]), **tol)
    np.testing.assert_allclose(back, x, **tol)
    h = rng.uniform(0, 1, size=(3, 4, 3)).astype(dtype)
    np.testing.assert_allclose(run(tf.image.hsv_to_rgb(tf.constant(h))), np_rgb(h), **tol)
    with pytest.raises(ValueError, match="rgb_to_hsv.*last dimension must be 3"):
        tf.image.rgb_to_hsv(tf.placeholder(tf.float32, [4, 4]))
    with pytest.raises(ValueError, match="hsv_to_rgb.*float"):
        tf.image.hsv_to_rgb(tf.placeholder(tf.uint8, [4, 3]))


@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_adjust_saturation(backend, dtype):
    x = colour_image((2, 4, 5, 3))
    if dtype == np.uint8:
        x = (x * 255).astype(np.uint8)
    ph = tf.placeholder(tf.as_dtype(dtype), [None, 4, 5, 3])
    for factor in (0.0, 0.4, 1.0, 2.5):
        out = run(tf.image.adjust_saturation(ph, factor), {ph: x})
        hsv = np_hsv(np_convert(x, np.float32))
        hsv[..., 1] = np.clip(hsv[..., 1] * factor, 0, 1)
        want = np_convert(np_rgb(hsv).astype(np.float32), dtype)
        assert out.dtype == dtype
        np.testing.assert_allclose(out, want, rtol=1e-5,
                                   atol=1 if dtype == np.uint8 else 1e-5)


@pytest.mark.parametrize("dtype", [np.float32, np.uint8])
def test_adjust_hue(backend, dtype):
    x = colour_image((2, 4, 5, 3))
    if dtype == np.uint8:
        x = (x * 255).astype(np.uint8)
    ph = tf.placeholder(tf.as_dtype(dtype), [None, 4, 5, 3])
    delta = tf.placeholder(tf.float32, [])
    fetches = [tf.image.adjust_hue(ph, d) for d in (0.0, 0.25, -0.6, 1.0)]
    fetches.append(tf.image.adjust_hue(ph, delta))
    outs = run(fetches, {ph: x, delta: -0.93})
    for out, d in zip(outs, (0.0, 0.25, -0.6, 1.0, -0.93)):
        hsv = np_hsv(np_convert(x, np.float32))
        hsv[..., 0] = np.mod(hsv[..., 0] + d, 1.0)
        want = np_convert(np_rgb(hsv).astype(np.float32), dtype)
        assert out.dtype == dtype
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1 if dtype == np.uint8 else 1e-5,
                                   err_msg=f"delta {d}")


def test_random_hue_and_saturation(backend):
    x = colour_image((3, 4, 3))
    ph = tf.placeholder(tf.float32, [3, 4, 3])
    hue = tf.image.random_hue(ph, 0.2, seed=4)
    sat = tf.image.random_saturation(ph, 0.5, 1.5, seed=5)
    base = np_hsv(x)
    with tf.Session() as sess:
        for _ in range(4):
            h, s = (np_hsv(v) for v in sess.run([hue, sat], {ph: x}))
            coloured = base[..., 1] > 0.05
            shift = np.mod(h[..., 0] - base[..., 0] + 0.5, 1.0) - 0.5
            assert np.ptp(shift[coloured]) < 1e-4 and abs(shift[coloured][0]) <= 0.2
            np.testing.assert_allclose(s[..., 0][coloured & (s[..., 1] > 0.05)],
                                       base[..., 0][coloured & (s[..., 1] > 0.05)], atol=1e-5)
    with pytest.raises(ValueError, match="max_delta must be <= 0.5"):
        tf.image.random_hue(ph, 0.6)
    with pytest.raises(ValueError, match="random_saturation: upper must be > lower"):
        tf.image.random_saturation(ph, 1.0, 1.0)


def test_empty_images(backend):
    """Zero images, rows or channels go through every shape-preserving function."""
    for shape in [(0, 3, 4, 3), (2, 0, 4, 3), (2, 3, 4, 0)]:
        x = np.zeros(shape, np.float32)
        ph = tf.placeholder(tf.float32, [None, None, None, None])
        fetches = {"lr": tf.image.flip_left_right(ph), "ud": tf.image.flip_up_down(ph),
                   "rot": tf.image.rot90(ph), "std": tf.image.per_image_standardization(ph),
                   "u8": tf.image.convert_image_dtype(ph, tf.uint8),
                   "pad": tf.image.pad_to_bounding_box(ph, 1, 0, shape[1] + 2, 4),
                   "tv": tf.image.total_variation(ph)}
        out = run(fetches, {ph: x})
        assert out["lr"].shape == out["ud"].shape == out["std"].shape == shape
        assert out["rot"].shape == (shape[0], 4, shape[1], shape[3])
        assert out["pad"].shape == (shape[0], shape[1] + 2, 4, shape[3])
        np.testing.assert_array_equal(out["tv"], np.zeros(shape[0]))


def test_bool_images_flip_but_do_not_resize(backend):
    x = rng.integers(0, 2, size=(3, 4, 1)).astype(bool)
    np.testing.assert_array_equal(run(tf.image.flip_left_right(tf.constant(x))), x[:, ::-1])
    with pytest.raises(ValueError, match="resize_bilinear: 'images' must be a numeric"):
        tf.image.resize_bilinear(tf.constant(x[None]), [2, 2])


def test_linear_image_functions_gradients(backend):
    """Gradients of the functions that move or mix pixels linearly (central differences
    are exact at a step of 1 for linear and quadratic functions)."""
    x = rng.standard_normal((2, 4, 5, 2))
    functions = [lambda t: tf.image.resize_bicubic(t, [3, 7]),
                 lambda t: tf.image.resize_area(t, [3, 2]),
                 lambda t: tf.image.flip_left_right(t) * t,
                 lambda t: tf.image.rot90(t, 3),
                 lambda t: tf.image.crop_to_bounding_box(t, 1, 2, 2, 3),
                 lambda t: tf.image.pad_to_bounding_box(t, 1, 0, 6, 7),
                 lambda t: tf.image.resize_image_with_crop_or_pad(t, 3, 8)]
    for fn in functions:
        check_gradients(fn, [x], eps=1.0, rtol=1e-5, atol=1e-5)
