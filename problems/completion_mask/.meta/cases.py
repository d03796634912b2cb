"""Inputs of completion_mask's table of cases (cases.json): the input forms the statement allows.

Every id dtype, every form of `eos_ids` and every refused input, each on a small batch whose
rows end at an EOS, at a later EOS id, or never.
"""

import numpy as np

INT_DTYPES = ["int8", "int16", "int32", "int64", "uint8", "uint16", "uint32", "uint64"]
# Row 0 ends at 2, row 1 at 7 (position 0), row 2 never: one EOS id or the other decides.
IDS = [[5, 6, 2, 7], [7, 2, 9, 9], [5, 6, 8, 9]]

EOS_FORMS = {
    "int": 2,
    "np_int64": np.int64(2),
    "np_int32": np.int32(7),
    "np_uint8": np.uint8(2),
    "list": [2],
    "tuple": (7,),
    "list_of_two": [2, 7],
    "tuple_of_two_reversed": (7, 2),
    "array_int64": np.array([2, 7]),
    "array_int32": np.array([7, 2], dtype=np.int32),
    "array_uint16_one": np.array([7], dtype=np.uint16),
    "list_of_numpy_ints": [np.int64(2), np.int16(7)],
    "repeated_id": [2, 2],
}

# Id 0 is an id like any other (an `if not eos_ids` check would refuse it): rows 0 and 1 end
# at a 0, row 2 never.
IDS_WITH_ZERO = [[5, 0, 2, 7], [0, 2, 9, 9], [5, 6, 8, 9]]
EOS_ZERO_FORMS = {
    "zero": 0,
    "np_int64_zero": np.int64(0),
    "np_uint8_zero": np.uint8(0),
    "list_of_zero": [0],
    "array_of_zero": np.array([0]),
}

REFUSED_EOS = {
    "empty_list": [],
    "empty_tuple": (),
    "empty_array": np.array([], dtype=np.int64),
    "true": True,
    "false": False,
    "numpy_bool": np.True_,
    "list_with_a_bool": [2, True],
    "bool_array": np.array([True, False]),
    "float": 2.0,
    "numpy_float": np.float64(2.0),
    "list_of_floats": [2.0],
    "float_array": np.array([2.0, 7.0]),
    "zero_d_array": np.array(2),
    "string": "2",
    "list_with_a_string": [2, "7"],
    "none": None,
    "nested_list": [[2, 7]],
    "2d_array": np.array([[2], [7]]),
    # Shapes that ids == eos_ids would broadcast against the (B, T) = (3, 4) ids: an id per row,
    # an id per position, or one id in two dimensions.
    "nested_list_per_row": [[2], [7], [9]],
    "2d_array_per_row": np.array([[2], [7], [9]]),
    "2d_array_per_position": np.array([[2, 7, 2, 7]]),
    "2d_array_of_one": np.array([[2]]),
}

REFUSED_IDS = {
    "1d": np.array([5, 2, 7]),
    "3d": np.ones((2, 3, 4), dtype=np.int64),
    # (B, T, T): positions compared with each row's first EOS broadcast to a 3-D mask here
    # instead of failing on mismatched axes as they do for (2, 3, 4).
    "3d_square": np.array([[[5, 2, 7]] * 3, [[2, 9, 9]] * 3], dtype=np.int64),
    "0d": np.array(2),
}


def cases() -> list[dict]:
    found = []
    for dtype in INT_DTYPES:
        for truncated in (False, True):
            found.append({
                "name": f"ids_{dtype}" + ("_mask_truncated" if truncated else ""),
                "function": "completion_mask",
                "args": [np.array(IDS, dtype=dtype), [7, 2]],
                "kwargs": {"mask_truncated": truncated},
                "about": f"{dtype} ids give an int64 mask",
            })  # fmt: skip
    for ids, forms in ((IDS, EOS_FORMS), (IDS_WITH_ZERO, EOS_ZERO_FORMS)):
        for name, eos_ids in forms.items():
            found.append({
                "name": f"eos_{name}",
                "function": "completion_mask",
                "args": [np.array(ids), eos_ids],
                "kwargs": {"mask_truncated": True},
                "about": f"eos_ids given as {type(eos_ids).__name__}",
            })  # fmt: skip
    for name, eos_ids in REFUSED_EOS.items():
        found.append({
            "name": f"refused_eos_{name}",
            "function": "completion_mask",
            "args": [np.array(IDS), eos_ids],
            "about": "ValueError: eos_ids must be an int or a non-empty sequence of ints",
        })  # fmt: skip
    for name, ids in REFUSED_IDS.items():
        found.append({
            "name": f"refused_ids_{name}",
            "function": "completion_mask",
            "args": [ids, 2],
            "about": "ValueError: ids must be 2-D",
        })  # fmt: skip
    return found
