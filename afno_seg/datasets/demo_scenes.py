"""The demo street scenes: :func:`render_scene` draws one image and its Cityscapes train-id labels.

What they look like and why: ``tools/dataset/make_demo_data.py``. Below, bottom-up: classes and
palettes, noise, the camera and canvas, the objects, the planning of a street, the drawing.
"""
from dataclasses import dataclass
from functools import lru_cache

import cv2
import numpy as np

__all__ = ['CLASSES', 'IGNORE', 'render_scene']

CLASSES = ('road', 'sidewalk', 'building', 'wall', 'fence', 'pole', 'traffic light', 'traffic sign',
           'vegetation', 'terrain', 'sky', 'person', 'rider', 'car', 'truck', 'bus', 'train',
           'motorcycle', 'bicycle')
(ROAD, SIDEWALK, BUILDING, WALL, FENCE, POLE, LIGHT, SIGN, VEGETATION, TERRAIN, SKY, PERSON, RIDER,
 CAR, TRUCK, BUS, TRAIN, MOTORCYCLE, BICYCLE) = range(len(CLASSES))
IGNORE = 255

SIDE_Z_MIN = 1.0  # metres; roadside objects nearer than this are outside the frame anyway

# Base colours (RGB). Greys appear in nearly every palette on purpose.
GREYS = [(80, 80, 82), (115, 115, 118), (150, 150, 150), (185, 185, 182)]
BUILDING_COLOURS = GREYS + [(200, 188, 165), (150, 82, 62), (222, 220, 212), (178, 148, 108),
                            (105, 118, 132), (92, 86, 80)]
SIDEWALK_COLOURS = GREYS[1:] + [(178, 168, 148), (150, 104, 92), (128, 124, 118)]
CAR_COLOURS = GREYS + [(30, 30, 34), (228, 228, 226), (160, 30, 30), (35, 60, 130), (40, 80, 55),
                       (190, 190, 198), (200, 160, 40)]
CLOTHES = GREYS + [(30, 30, 35), (40, 55, 95), (150, 40, 40), (225, 225, 220), (60, 90, 60),
                   (130, 100, 70), (200, 170, 60)]
SKINS = [(225, 190, 160), (190, 145, 110), (140, 100, 70), (90, 62, 45)]
GREENS = [(60, 100, 45), (85, 120, 50), (40, 70, 40), (110, 125, 60), (125, 110, 55)]
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
    ang = np.linspace(0, 2 * np.pi, n, endpoint=False)
    return np.stack([x + radius * np.cos(ang), np.zeros(n), z + radius * np.sin(ang)], -1)


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
        marks += [scene.project(_ground(x - 0.07, x + 0.07, z, z + dash))
                  for z in np.arange(zn, stop, period)]
    if rng.random() < 0.5:  # solid edge lines
        marks += [scene.project(_ground(x - 0.07, x + 0.07, zn, stop))
                  for x in (left + 0.3, right - 0.3)]
    if rng.random() < 0.25:  # zebra crossing
        z0 = rng.uniform(6, 25)
        marks += [scene.project(_ground(x, x + 0.5, z0, z0 + 3))
                  for x in np.arange(left + 0.3, right - 0.5, 1.0)]
    scene.fill(marks, paint, ROAD, 0.1, 0.1)
    if rng.random() < 0.4:  # manhole cover
        disc = _ground_disc(rng.uniform(left + 1, right - 1), rng.uniform(5, 20), 0.35)
        scene.paint([disc], road_colour * 0.6, ROAD)


@dataclass
class _Light:
    """Per-image illumination: sun strength (0 = overcast) and the side the sun shines from."""
    sun: float
    sun_side: int

    def facade_gain(self, side):
        lit = -side == self.sun_side  # a facade on side s faces -s
        return 1 + 0.15 * self.sun if lit else 1 - 0.4 * self.sun


def _draw_building(scene, rng, side, x, z0, z1, height, light, sky_colour):
    colour = _pick(rng, BUILDING_COLOURS) * rng.uniform(0.8, 1.15)
    if z0 > SIDE_Z_MIN:  # the wall facing the camera where the previous building ends
        face = _front(*sorted((x, x + side * 15.0)), 0, height, z0)
        scene.paint([face], colour * (1 - 0.25 * light.sun), BUILDING, 0.04, 0.08)
    zs = max(z0, SIDE_Z_MIN)
    gain = light.facade_gain(side)
    scene.paint([_lateral(x, 0, height, zs, z1)], colour * gain, BUILDING, 0.04, 0.08)
    floor_h, spacing = rng.uniform(2.8, 3.6), rng.uniform(2.2, 4.0)
    win_w, win_h = spacing * rng.uniform(0.35, 0.7), floor_h * rng.uniform(0.4, 0.65)
    if rng.random() < 0.3:  # cornice bands between floors
        bands = [scene.project(_lateral(x, y, y + 0.25, zs, z1))
                 for y in np.arange(floor_h, height - 0.5, floor_h)]
        scene.fill(bands, colour * gain * rng.uniform(0.75, 1.2))
    first = 0
    if rng.random() < 0.5:  # shop front: a glass band on the ground floor
        scene.paint([_lateral(x, 0.4, floor_h * 0.8, zs, z1)],
                   _pick(rng, [(40, 45, 55), tuple(sky_colour * 0.6)], 20), BUILDING, 0.02, 0.05)
        first = 1
    if rng.random() < 0.1:
        return  # blank wall
    ys = np.arange(first, int((height - 0.6) // floor_h)) * floor_h + (floor_h - win_h) / 2
    zc = np.arange(z0 + spacing / 2, z1 - spacing / 2, spacing)
    zc = zc[zc - win_w / 2 > SIDE_Z_MIN]
    if len(ys) == 0 or len(zc) == 0:
        return
    yy, zz = np.meshgrid(ys, zc, indexing='ij')
    yy, zz = yy.ravel(), zz.ravel()
    corners = ((0, -win_w / 2), (0, win_w / 2), (win_h, win_w / 2), (win_h, -win_w / 2))
    quads = np.stack([np.stack([np.full_like(yy, x), yy + dy, zz + dz], -1)
                      for dy, dz in corners], 1)
    pix = scene.project(quads)
    group = rng.integers(0, 3, len(pix))  # dark glass, sky reflection, lit or curtained
    glass = [_pick(rng, [(35, 42, 55)], 12), np.clip(sky_colour * rng.uniform(0.55, 0.9), 0, 255),
             _pick(rng, [(200, 180, 140), (150, 150, 150)], 20)]
    for g in range(3):
        scene.fill(list(pix[group == g]), glass[g] * gain, None, 0.02, 0.04)


def _draw_tree(scene, rng, x, z, size=1.0):
    trunk_h, crown_r = rng.uniform(1.8, 3.5) * size, rng.uniform(1.5, 3.5) * size
    trunk = _pick(rng, [(80, 65, 50), (100, 100, 95)], 15)
    stem = _front(x - 0.15 * size, x + 0.15 * size, 0, trunk_h + crown_r * 0.5, z)
    scene.paint([stem], trunk, VEGETATION, 0.1, 0.2)
    green = _pick(rng, GREENS, 15)
    cy = trunk_h + crown_r * 0.8
    ang = np.linspace(0, 2 * np.pi, 32, endpoint=False)
    wobble = 1 + sum(rng.uniform(0.03, 0.1) * np.sin(k * ang + rng.uniform(0, 6.3))
                     for k in (3, 5, 8))
    scene.fill([scene.disc((x, cy, z), crown_r, 32, wobble)], green, VEGETATION, 0.22, 0.4)
    for _ in range(rng.integers(4, 10)):  # leaf clumps in light and shade
        r = crown_r * rng.uniform(0.2, 0.45)
        cx, cyy = x + rng.uniform(-0.5, 0.5) * crown_r, cy + rng.uniform(-0.5, 0.5) * crown_r
        clump = scene.disc((cx, cyy, z - 0.01), r, 14)
        scene.fill([clump], green * rng.uniform(0.6, 1.35), VEGETATION)


def _draw_gap(scene, rng, x, z0, z1, kind):
    zs = max(z0, SIDE_Z_MIN)
    if zs >= z1:
        return
    if kind == 'hedge':
        zz = np.arange(zs, z1, 0.5)
        top = rng.uniform(0.8, 2.0) + 0.12 * rng.standard_normal(len(zz))
        pts = [(x, 0, zs)] + [(x, t, z) for t, z in zip(top, zz)] + [(x, top[-1], z1), (x, 0, z1)]
        scene.paint([pts], _pick(rng, GREENS), VEGETATION, 0.25, 0.4)
    elif kind == 'wall':
        colour = _pick(rng, BUILDING_COLOURS)
        h = rng.uniform(0.8, 2.5)
        scene.paint([_lateral(x, 0, h, zs, z1)], colour, WALL, 0.06, 0.15)
        scene.paint([_lateral(x, h - 0.15, h, zs, z1)], colour * 1.15, WALL)
    elif kind == 'fence':
        colour = _pick(rng, [(60, 75, 60), (110, 110, 110), (50, 50, 52)], 12)
        h = rng.uniform(1.0, 2.0)
        bars = [scene.project(_lateral(x, y, y + 0.07, zs, z1)) for y in (0.3, h - 0.1)]
        scene.fill(bars, colour, FENCE, 0.05, 0.05)
        posts = [scene.project(_front(x - 0.04, x + 0.04, 0, h, z))
                 for z in np.arange(z1, zs, -rng.uniform(0.25, 2.0))]
        scene.fill(posts, colour, FENCE, 0.05, 0.05)


def _draw_pole(scene, rng, side, x, z, kind):
    colour = _pick(rng, GREYS + [(55, 65, 55), (40, 40, 42)], 10)
    w = rng.uniform(0.1, 0.22)
    h = rng.uniform(*{'light': (6, 9), 'sign': (2.4, 3.4), 'signal': (3.2, 4.5)}[kind])
    scene.paint([_front(x - w / 2, x + w / 2, 0, h, z)], colour, POLE, 0.04, 0.05)
    if kind == 'light':  # arm reaching over the road with a lamp head
        tip = x - side * rng.uniform(1.0, 2.5)
        scene.paint([_front(*sorted((x, tip)), h - 0.12, h, z)], colour, POLE)
        scene.paint([_front(*sorted((tip, tip - side * 0.6)), h - 0.25, h, z)], colour * 1.2, POLE)
    elif kind == 'sign':
        s, cy = rng.uniform(0.55, 0.85), h - 0.35
        shape = rng.integers(3)
        outer = _pick(rng, [(200, 30, 30), (30, 70, 170), (230, 230, 225), (225, 190, 40)], 15)
        if shape == 0:
            poly = scene.disc((x, cy, z - 0.01), s / 2, 24)
        elif shape == 1:
            poly = scene.project([(x - s / 2, cy - s / 2.5, z), (x + s / 2, cy - s / 2.5, z),
                                  (x, cy + s / 2, z)])
        else:
            poly = scene.project(_front(x - s / 2, x + s / 2, cy - s / 3, cy + s / 3, z - 0.01))
        scene.fill([poly], outer, SIGN, 0.03, 0.05)
        if shape == 0:
            inner = _pick(rng, [(235, 235, 232), (40, 90, 190)])
            scene.fill([scene.disc((x, cy, z - 0.02), s / 3, 24)], inner, SIGN)
    else:  # traffic signal: housing with three lamps, one lit
        bx = x - side * 0.2
        housing = _pick(rng, [(30, 32, 30), (70, 80, 50), (120, 120, 118)], 10)
        box = _front(bx - 0.17, bx + 0.17, h - 1.0, h, z - 0.05)
        scene.paint([box], housing, LIGHT, 0.03, 0.05)
        on = rng.integers(3)
        for i, lit in enumerate([(255, 40, 30), (255, 190, 40), (60, 230, 120)]):
            c = np.float32(lit) if i == on else housing * 0.5 + 20
            scene.fill([scene.disc((bx, h - 0.2 - 0.3 * i, z - 0.06), 0.1, 12)], c, LIGHT)


def _draw_vehicle(scene, rng, x, z, kind, light):
    w, h, length = {'car': (rng.uniform(1.65, 1.95), rng.uniform(1.35, 1.6), rng.uniform(3.9, 4.8)),
                    'truck': (2.4, rng.uniform(2.8, 3.6), rng.uniform(6, 9)),
                    'bus': (2.5, rng.uniform(2.9, 3.3), rng.uniform(10, 13))}[kind]
    label = {'car': CAR, 'truck': TRUCK, 'bus': BUS}[kind]
    colour = _pick(rng, CAR_COLOURS if kind == 'car' else CAR_COLOURS[4:], 15)
    glass = np.clip(_pick(rng, [(30, 35, 45), (90, 100, 115)], 15), 0, 255)
    tyre = _pick(rng, [(25, 25, 27)], 6)
    x0, x1 = x - w / 2, x + w / 2
    belt = h * (0.55 if kind == 'car' else 0.92)
    contact = _ground(x0 - 0.15, x1 + 0.15, z - 0.3, z + length)
    scene.darken(scene.project(contact), 0.45 + 0.2 * (1 - light.sun))
    sx = x0 if x0 > 0.3 else (x1 if x1 < -0.3 else None)  # the side facing the camera, if any
    if sx is not None:
        scene.paint([_lateral(sx, 0.25, belt, z, z + length)], colour * 0.85, label, 0.02, 0.05)
        if kind == 'car':
            cabin = [(sx, belt, z + 0.12 * length), (sx, h, z + 0.32 * length),
                     (sx, h, z + 0.72 * length), (sx, belt, z + 0.88 * length)]
            scene.paint([cabin], colour * 0.85, label)
            win = [(sx, belt + 0.06, z + 0.2 * length), (sx, h - 0.06, z + 0.35 * length),
                   (sx, h - 0.06, z + 0.7 * length), (sx, belt + 0.06, z + 0.8 * length)]
            scene.paint([win], glass, label, 0.02, 0.03)
        elif kind == 'bus':
            zw = np.arange(z + 0.5, z + length - 1.5, 1.6)
            scene.paint([_lateral(sx, 1.3, h - 0.35, a, a + 1.4) for a in zw], glass, label)
        else:
            cab_window = _lateral(sx, belt * 0.45, belt - 0.2, z + length - 2.0, z + length - 0.4)
            scene.paint([cab_window], glass, label)
        r = 0.32 if kind == 'car' else 0.5
        ang = np.linspace(0, 2 * np.pi, 14, endpoint=False)
        scene.paint([np.stack([np.full(14, sx), r + r * np.sin(ang), c + r * np.cos(ang)], -1)
                     for c in (z + 0.18 * length, z + 0.82 * length)], tyre, label)
    if kind == 'car':
        if scene.cam_height > h:
            roof = _ground(x0 + 0.25, x1 - 0.25, z + 0.6, z + 0.7 * length, h)
            scene.paint([roof], colour, label)
        scene.paint([_ground(x0, x1, z, z + 0.6, belt)], colour, label)
        cabin = [(x0 + 0.1, belt, z + 0.6), (x1 - 0.1, belt, z + 0.6), (x1 - 0.25, h, z + 0.6),
                 (x0 + 0.25, h, z + 0.6)]
        scene.paint([cabin], colour, label)
        win = [(x0 + 0.2, belt + 0.05, z + 0.59), (x1 - 0.2, belt + 0.05, z + 0.59),
               (x1 - 0.32, h - 0.07, z + 0.59), (x0 + 0.32, h - 0.07, z + 0.59)]
        scene.paint([win], glass, label, 0.02, 0.03)
    scene.paint([_front(a, a + 0.25, 0, 0.35, z + 0.3) for a in (x0 + 0.05, x1 - 0.3)], tyre, label)
    scene.paint([_front(x0, x1, 0.22, belt, z)], colour, label, 0.02, 0.05)
    if kind == 'bus':
        scene.paint([_front(x0 + 0.15, x1 - 0.15, belt * 0.55, belt - 0.2, z - 0.01)], glass, label)
    lamp_y = belt - 0.28
    lamps = [_front(a, a + 0.25, lamp_y, lamp_y + 0.15, z - 0.01) for a in (x0 + 0.05, x1 - 0.3)]
    scene.paint(lamps, _pick(rng, [(190, 25, 25)], 20), label)
    plate = _front(x - 0.26, x + 0.26, 0.4, 0.52, z - 0.01)
    scene.paint([plate], _pick(rng, [(225, 225, 220)], 10), label)


def _draw_person(scene, rng, x, z):
    h = rng.uniform(1.5, 1.9)
    trousers, shirt, skin = _pick(rng, CLOTHES), _pick(rng, CLOTHES), _pick(rng, SKINS, 10)
    stride = rng.uniform(-0.08, 0.08)
    legs = [scene.project(_front(x - 0.17 + stride, x - 0.03, 0, 0.48 * h, z)),
            scene.project(_front(x + 0.03, x + 0.17 - stride, 0, 0.48 * h, z))]
    scene.fill(legs, trousers, PERSON, 0.05, 0.08)
    scene.paint([_front(x - 0.3, x + 0.3, 0.5 * h, 0.8 * h, z)], shirt * 0.9, PERSON)
    torso = [(x - 0.2, 0.45 * h, z), (x + 0.2, 0.45 * h, z), (x + 0.23, 0.82 * h, z),
             (x - 0.23, 0.82 * h, z)]
    scene.paint([torso], shirt, PERSON, 0.05, 0.08)
    scene.fill([scene.disc((x, 0.91 * h, z), 0.075 * h, 14)], skin, PERSON, 0.03, 0.05)
    hair = [(x - 0.075 * h, 0.92 * h, z), (x + 0.075 * h, 0.92 * h, z), (x, 0.99 * h, z)]
    scene.paint([hair], _pick(rng, [(30, 25, 20), (110, 80, 50), (200, 180, 120)], 10), PERSON)
    if rng.random() < 0.25:
        bag = _front(x + 0.2, x + 0.42, 0.4 * h, 0.6 * h, z - 0.05)
        scene.paint([bag], _pick(rng, CLOTHES), PERSON)


def _plan_side(rng, street, side, light, sky_colour, back, shadows):
    """Facades, gaps and their contents along one side as (depth, draw, args) back-layer items."""
    x_facade = street.facade(side)
    z = rng.uniform(-8, 4)
    while z < street.z_end:
        if rng.random() < 0.35:  # gap between buildings
            z1 = min(z + rng.uniform(4, 16), street.z_end)
            kind = ('hedge', 'wall', 'fence', 'open', 'open')[rng.integers(5)]
            back.append((z1, _draw_gap, (x_facade, z, z1, kind)))
            for tz in np.arange(z + rng.uniform(1, 4), z1, rng.uniform(3, 7)):
                if tz > 2:
                    tx = x_facade + side * rng.uniform(1, 5)
                    back.append((tz + 0.5, _draw_tree, (tx, tz)))
        else:
            z1 = min(z + rng.uniform(8, 35), street.z_end + 10)
            height = rng.uniform(5, 24) if rng.random() < 0.9 else rng.uniform(25, 45)
            x = x_facade + side * rng.uniform(0, 1.0)
            back.append((z1, _draw_building, (side, x, z, z1, height, light, sky_colour)))
            if light.sun > 0.2 and side == light.sun_side:  # its shadow falls across the street
                reach = min(height * rng.uniform(0.3, 0.9), abs(x - street.facade(-side)))
                dz = height * rng.uniform(-0.4, 0.4)
                z_from = max(z + dz, street.z_near)
                z_to = max(z1 + dz, z_from + 0.1)
                shadows.append(_ground(*sorted((x, x - side * reach)), z_from, z_to))
        z = z1


def _plan_front(rng, street, light, front, shadows):
    """Poles, street trees, vehicles and people, as (depth, draw, args) front-layer items."""
    for side in (-1, 1):
        kerb, (w_in, w_out) = street.kerb(side), street.walk[side]
        for z in np.arange(rng.uniform(3, 15), min(street.z_end, 120), rng.uniform(12, 35)):
            kind = ('light', 'light', 'sign', 'signal')[rng.integers(4)]
            front.append((z, _draw_pole, (side, w_in + side * 0.5, z, kind)))
        if rng.random() < 0.35:
            for z in np.arange(rng.uniform(4, 12), min(street.z_end, 90), rng.uniform(9, 18)):
                front.append((z, _draw_tree, (w_in + side, z, 0.8)))
                if light.sun > 0.2:  # crown shadow, kept in front of the camera (Z > 0)
                    radius = rng.uniform(1.5, 3)
                    zc = max(z + rng.uniform(-1, 1), street.z_near + radius)
                    shadows.append(_ground_disc(w_in + side, zc, radius))
        if rng.random() < 0.6:  # parked cars along the kerb
            z = rng.uniform(2, 10)
            while z < min(street.z_end, 70):
                if rng.random() < 0.75:
                    front.append((z, _draw_vehicle, (kerb - side * 1.1, z, 'car', light)))
                z += rng.uniform(5, 9)
        for _ in range(rng.poisson(3 if rng.random() < 0.8 else 10)):
            x, z = rng.uniform(min(w_in, w_out) + 0.3, max(w_in, w_out) - 0.3), rng.uniform(3, 45)
            front.append((z, _draw_person, (x, z)))
    left, right = street.road
    lanes = max(1, int(round((right - left) / 3.3)))
    taken = []
    for _ in range(rng.poisson(2.5)):
        lane = rng.integers(lanes)
        x, z = left + (lane + 0.5) * (right - left) / lanes, rng.uniform(5, 70)
        if any(used == lane and abs(z - t) < 14 for used, t in taken):
            continue
        taken.append((lane, z))
        kind = 'car' if rng.random() < 0.82 else ('bus', 'truck')[rng.integers(2)]
        front.append((z, _draw_vehicle, (x, z, kind, light)))


def _finish(scene, rng, sky_colour):
    """Textures, illumination, haze, optics and sensor noise on the painted radiance."""
    h, w = scene.h, scene.w
    fine = _pixel_noise(rng, (h, w, 1)) + 0.3 * _pixel_noise(rng, (h, w, 3))
    img = scene.image * np.clip(1 + scene.grain[..., None] * fine, 0.3, 2)
    # One gain map: texture blobs, uneven illumination, vignetting and exposure.
    gain = np.clip(1 + scene.mottle * _smooth_noise(rng, h, w, max(2.0, w / 80)), 0.3, 2)
    gain *= 1 + 0.12 * _smooth_noise(rng, h, w, w / 3)
    r2 = (np.linspace(-1, 1, h, dtype=np.float32)[:, None] ** 2
          + np.linspace(-1, 1, w, dtype=np.float32)[None] ** 2)
    gain *= np.float32(rng.uniform(0.65, 1.3)) * (1 - np.float32(rng.uniform(0, 0.125)) * r2)
    img *= gain[..., None]
    img *= rng.uniform(0.87, 1.13, 3).astype(np.float32)  # colour cast
    rows = np.abs(np.arange(h, dtype=np.float32) - scene.horizon) / np.float32(0.12 * h)
    haze = (np.float32(rng.uniform(0, 0.4)) * np.exp(-rows))[:, None, None]  # thickest at horizon
    img = img * (1 - haze) + sky_colour * haze
    img = cv2.GaussianBlur(img, (0, 0), rng.uniform(0.4, 0.9))
    gamma = rng.uniform(0.8, 1.25)
    img = cv2.pow(np.clip(img, 0, 255) * np.float32(1 / 255), gamma) * np.float32(255)
    img += np.float32(rng.uniform(1.5, 5)) * _pixel_noise(rng, img.shape)  # sensor noise
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def render_scene(rng, height, width):
    """Draw one street scene.

    Args:
        rng (numpy.random.Generator): the only source of randomness.
        height (int): image height in pixels.
        width (int): image width in pixels.

    Returns:
        tuple[np.ndarray, np.ndarray]: RGB image (H, W, 3) uint8 and train-id labels (H, W) uint8.
    """
    scene = _Scene(height, width, focal=width * rng.uniform(0.55, 0.8),
                   cx=width * rng.uniform(0.38, 0.62), horizon=height * rng.uniform(0.36, 0.5),
                   cam_height=rng.uniform(1.2, 1.8))
    light = _Light(sun=float(rng.uniform(0, 1) if rng.random() < 0.7 else 0.0),
                   sun_side=int(rng.choice([-1, 1])))
    sky_colour = _paint_sky(scene, rng)
    street = _plan_street(rng, scene)
    back, front, shadows = [], [], []
    for side in (-1, 1):
        _plan_side(rng, street, side, light, sky_colour, back, shadows)
    _plan_front(rng, street, light, front, shadows)
    _paint_ground(scene, rng, street)
    for quad in shadows:
        scene.darken(scene.project(quad), 1 - 0.5 * light.sun)
    if street.backdrop:  # a row of distant buildings closing the street, faded by haze
        x = -150.0
        while x < 150:
            x1 = x + rng.uniform(8, 30)
            colour = _pick(rng, BUILDING_COLOURS) * 0.6 + sky_colour * 0.4
            face = _front(x, x1, 0, rng.uniform(8, 45), street.z_end + rng.uniform(0, 8))
            scene.paint([face], colour, BUILDING, 0.03, 0.1)
            x = x1
    for _, draw, args in sorted(back, key=lambda item: -item[0]):  # far to near
        draw(scene, rng, *args)
    for _, draw, args in sorted(front, key=lambda item: -item[0]):
        draw(scene, rng, *args)
    if rng.random() < 0.35:  # ego-vehicle hood: ignored, as in Cityscapes
        xs = np.linspace(0, width, 24)
        bulge = height * 0.05 * ((xs - width / 2) / (width / 2)) ** 2
        top = height * (1 - rng.uniform(0.06, 0.12)) + bulge
        hood = np.round(np.concatenate([np.stack([xs, top], -1), [[width, height], [0, height]]]))
        scene.fill([hood.astype(np.int32)], _pick(rng, CAR_COLOURS, 10) * 0.7, IGNORE, 0.02, 0.2)
    return _finish(scene, rng, sky_colour), scene.labels
