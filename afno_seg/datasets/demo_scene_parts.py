"""The parts of the demo street scenes (:mod:`.demo_scenes`): classes and ground palettes, noise,
the camera and canvas, the ground and the sky, bottom-up."""
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

CLASSES = ('road', 'sidewalk', 'building', 'wall', 'fence', 'pole', 'traffic light', 'traffic sign',
           'vegetation', 'terrain', 'sky', 'person', 'rider', 'car', 'truck', 'bus', 'train',
           'motorcycle', 'bicycle')
(ROAD, SIDEWALK, BUILDING, WALL, FENCE, POLE, LIGHT, SIGN, VEGETATION, TERRAIN, SKY, PERSON, RIDER,
 CAR, TRUCK, BUS, TRAIN, MOTORCYCLE, BICYCLE) = range(len(CLASSES))
IGNORE = 255

# Ground and sky colours (RGB). Greys appear in nearly every palette on purpose.
GREYS = [(80, 80, 82), (115, 115, 118), (150, 150, 150), (185, 185, 182)]
SIDEWALK_COLOURS = GREYS[1:] + [(178, 168, 148), (150, 104, 92), (128, 124, 118)]
TERRAINS = [(95, 125, 60), (120, 135, 75), (140, 128, 92), (118, 100, 80)]
SKIES = [((70, 120, 200), (175, 200, 228)), ((150, 156, 166), (202, 204, 208)),
         ((178, 190, 204), (222, 222, 216)), ((62, 82, 140), (228, 172, 124))]


def _pick(rng, palette, jitter=18.0):
    """A palette colour with per-channel jitter, as float RGB."""
    base = np.asarray(palette[rng.integers(len(palette))], np.float32)
    return np.clip(base + rng.uniform(-jitter, jitter, 3), 0, 255).astype(np.float32)


def _pixel_noise(rng, shape):
    """Zero-mean, unit-variance white noise (uniform: a third of the cost of Gaussian draws)."""
    return (rng.random(shape, np.float32) - np.float32(0.5)) * np.float32(12 ** 0.5)


def _smooth_noise(rng, height, width, cell):
    """Zero-mean, unit-variance noise correlated over about ``cell`` pixels (bicubic upsampling)."""
    grid = (int(height // cell) + 3, int(width // cell) + 3)
    coarse = rng.standard_normal(grid).astype(np.float32)
    field = cv2.resize(coarse, (width, height), interpolation=cv2.INTER_CUBIC)
    return (field - field.mean()) / (field.std() + 1e-6)


@dataclass
class _Street:
    """Street cross-section in camera coordinates (metres, X to the right, Z forward)."""
    road: tuple            # (left, right) road edges
    walk: dict             # side (-1 left, +1 right) -> (inner, outer) sidewalk X
    verge: dict            # side -> (inner, outer) grass verge X between kerb and sidewalk, or None
    z_near: float          # nearest ground distance drawn (off the bottom of the image)
    z_end: float           # where the street is closed by a backdrop of buildings
    backdrop: bool

    def kerb(self, side):
        return self.road[0] if side < 0 else self.road[1]

    def facade(self, side):
        return self.walk[side][1]


class _Scene:
    """Render target: RGB radiance, train-id labels and per-pixel texture amplitudes.

    Polygons are filled into all maps with the same rasteriser, so labels match the painted pixels
    exactly; textures are applied at the end as ``image *= (1 + grain n_fine) (1 + mottle n_blob)``.
    """

    def __init__(self, height, width, focal, cx, horizon, cam_height):
        self.h, self.w = height, width
        self.focal, self.cx, self.horizon, self.cam_height = focal, cx, horizon, cam_height
        self.image = np.zeros((height, width, 3), np.float32)
        self.labels = np.full((height, width), SKY, np.uint8)
        self.grain = np.zeros((height, width), np.float32)
        self.mottle = np.zeros((height, width), np.float32)

    def project(self, points):
        """World points (..., 3) as (X, Y up, Z forward) -> integer pixel coordinates (..., 2)."""
        if isinstance(points, list):  # a few vertices: plain Python is several times faster here
            f, cx, cy, ch = self.focal, self.cx, self.horizon, self.cam_height
            return np.array([(round(cx + f * x / z), round(cy + f * (ch - y) / z))
                             for x, y, z in points], np.int32)
        p = np.asarray(points, np.float64)
        x = self.cx + self.focal * p[..., 0] / p[..., 2]
        y = self.horizon + self.focal * (self.cam_height - p[..., 1]) / p[..., 2]
        return np.round(np.stack([x, y], -1)).astype(np.int32)

    def fill(self, polygons, colour, label=None, grain=None, mottle=None):
        """Fill non-overlapping pixel polygons (each (N, 2) int32) in one colour and label."""
        polys = [np.ascontiguousarray(p, np.int32).reshape(-1, 1, 2) for p in polygons]
        if not polys:
            return
        cv2.fillPoly(self.image, polys, np.asarray(colour, np.float64).tolist())
        for target, value in ((self.labels, label), (self.grain, grain), (self.mottle, mottle)):
            if value is not None:
                value = float(value) if target.dtype == np.float32 else int(value)
                cv2.fillPoly(target, polys, value)

    def paint(self, shapes, colour, label=None, grain=None, mottle=None):
        """:meth:`fill` with world polygons (vertex lists or arrays of (X, Y, Z)), projected."""
        self.fill([self.project(shape) for shape in shapes], colour, label, grain, mottle)

    def darken(self, polygon, factor):
        """Multiply the pixels under a polygon by ``factor`` (cast shadows; labels untouched)."""
        polygon = np.int32(polygon).reshape(-1, 2)
        x0, y0 = np.maximum(polygon.min(0), 0)
        x1, y1 = np.minimum(polygon.max(0) + 1, (self.w, self.h))
        if x0 >= x1 or y0 >= y1:
            return
        mask = np.zeros((y1 - y0, x1 - x0), np.uint8)  # only the bounding box: shadows are many
        cv2.fillPoly(mask, [(polygon - (x0, y0)).reshape(-1, 1, 2)], 1)
        self.image[y0:y1, x0:x1][mask.astype(bool)] *= factor

    def disc(self, centre, radius, n=20, wobble=None):
        """Pixel polygon of a (possibly ragged) disc facing the camera at world ``centre``."""
        (px, py), r = self.project([centre])[0], self.focal * radius / centre[2]
        unit = _unit_circle(n) * (r if wobble is None else r * wobble[:, None])
        return np.round(unit * (1.0, 0.92) + (px, py)).astype(np.int32)


@lru_cache(maxsize=None)
def _unit_circle(n):
    ang = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return np.stack([np.cos(ang), np.sin(ang)], -1)


# World-space quads; vertex order keeps them simple polygons after projection.
def _front(x0, x1, y0, y1, z):
    """Rectangle facing the camera in the plane Z = z."""
    return [(x0, y0, z), (x1, y0, z), (x1, y1, z), (x0, y1, z)]


def _lateral(x, y0, y1, z0, z1):
    """Rectangle in the plane X = x (a facade or a vehicle side)."""
    return [(x, y0, z0), (x, y0, z1), (x, y1, z1), (x, y1, z0)]


def _ground(x0, x1, z0, z1, y=0.0):
    """Horizontal rectangle at height y."""
    return [(x0, y, z0), (x1, y, z0), (x1, y, z1), (x0, y, z1)]


def _ground_disc(x, z, radius, n=16):
    """Horizontal disc on the ground (a tree's shadow, a manhole cover)."""
    cos, sin = _unit_circle(n).T
    return np.stack([x + radius * cos, np.zeros(n), z + radius * sin], -1)


def _paint_sky(scene, rng):
    top, horizon_colour = (np.asarray(c, np.float32) for c in SKIES[rng.integers(len(SKIES))])
    top, horizon_colour = top + rng.uniform(-15, 15, 3), horizon_colour + rng.uniform(-12, 12, 3)
    t = np.clip(np.arange(scene.h, dtype=np.float32) / max(scene.horizon, 1.0), 0, 1) ** 0.8
    scene.image[:] = (top[None] * (1 - t[:, None]) + horizon_colour[None] * t[:, None])[:, None]
    cover = rng.uniform(0.0, 0.7)
    if cover > 0.15:  # clouds: soft white-grey blobs where a smooth field exceeds a threshold
        field = (_smooth_noise(rng, scene.h, scene.w, scene.w / 7)
                 + 0.4 * _smooth_noise(rng, scene.h, scene.w, scene.w / 25))
        alpha = np.clip((field - (1.2 - 2 * cover)) * 0.8, 0, 0.9)[..., None]
        cloud = np.float32(rng.uniform(170, 245)) * np.float32([1.0, 1.0, 1.02])
        scene.image[:] = scene.image * (1 - alpha) + cloud * alpha
    return horizon_colour


def _plan_street(rng, scene):
    width = rng.uniform(6.5, 14.0)
    offset = rng.uniform(-0.3, 0.3) * width
    road = (-width / 2 - offset, width / 2 - offset)
    walk, verge = {}, {}
    for side, inner in ((-1, road[0]), (1, road[1])):
        verge[side] = None
        if rng.random() < 0.25:
            verge[side] = (inner, inner + side * rng.uniform(0.8, 2.5))
            inner = verge[side][1]
        walk[side] = (inner, inner + side * rng.uniform(1.8, 5.0))
    # The nearest ground row must lie below the image bottom so no sky shows under the road.
    z_near = min(1.0, scene.focal * scene.cam_height / (scene.h - scene.horizon + 2) * 0.9)
    return _Street(road, walk, verge, z_near, rng.uniform(60, 220), rng.random() < 0.7)


def _paint_ground(scene, rng, street):
    far = street.z_end + 5 if street.backdrop else 3000.0
    zn = street.z_near
    scene.paint([_ground(-150, 150, zn, 3000)], _pick(rng, TERRAINS), TERRAIN, 0.25, 0.35)
    for side in (-1, 1):
        if street.verge[side]:
            scene.paint([_ground(*sorted(street.verge[side]), zn, far)],
                       _pick(rng, TERRAINS), TERRAIN, 0.25, 0.35)
        a, b = sorted(street.walk[side])
        walk_colour = _pick(rng, SIDEWALK_COLOURS)
        scene.paint([_ground(a, b, zn, far)], walk_colour, SIDEWALK, 0.06, 0.12)
        tile = rng.uniform(0.5, 1.5)  # paving seams, dense only where they are resolvable
        seams = [scene.project(_ground(a, b, z, z + 0.04)) for z in np.arange(zn + tile, 35, tile)]
        scene.fill(seams, walk_colour * rng.uniform(0.7, 0.9))
        kerb = street.kerb(side)
        scene.paint([_ground(*sorted((kerb, kerb + side * 0.2)), zn, far)],
                   _pick(rng, GREYS[2:]), SIDEWALK, 0.05, 0.05)
    left, right = street.road
    road_colour = _pick(rng, [(70, 70, 72), (95, 95, 96), (120, 118, 116), (135, 135, 138)], 8)
    scene.paint([_ground(left, right, zn, far)], road_colour, ROAD, 0.08, 0.07)
    for _ in range(rng.integers(0, 5)):  # repaired patches and stains
        x0 = rng.uniform(left, right - 1)
        z0 = rng.uniform(zn + 1, 40)
        patch = _ground(x0, min(right, x0 + rng.uniform(0.8, 4)), z0, z0 + rng.uniform(1, 8))
        scene.paint([patch], road_colour * rng.uniform(0.7, 1.25), ROAD, 0.1, 0.15)
    paint = _pick(rng, [(235, 235, 230), (225, 195, 70)], 10)
    lanes = max(1, int(round((right - left) / 3.3)))
    stop = min(street.z_end, 150)
    dash, period = rng.uniform(2, 4), rng.uniform(6, 12)
    marks = []
    for k in range(1, lanes):
        x = left + k * (right - left) / lanes
        marks += [_ground(x - 0.07, x + 0.07, z, z + dash) for z in np.arange(zn, stop, period)]
    if rng.random() < 0.5:  # solid edge lines
        marks += [_ground(x - 0.07, x + 0.07, zn, stop) for x in (left + 0.3, right - 0.3)]
    if rng.random() < 0.25:  # zebra crossing
        z0 = rng.uniform(6, 25)
        marks += [_ground(x, x + 0.5, z0, z0 + 3) for x in np.arange(left + 0.3, right - 0.5, 1.0)]
    scene.paint(marks, paint, ROAD, 0.1, 0.1)
    if rng.random() < 0.4:  # manhole cover
        disc = _ground_disc(rng.uniform(left + 1, right - 1), rng.uniform(5, 20), 0.35)
        scene.paint([disc], road_colour * 0.6, ROAD)
