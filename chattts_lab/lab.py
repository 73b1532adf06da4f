"""The lab engine (placeholder until the performance work lands): not available yet."""

LAB_EXTRA_PRECISIONS: tuple[str, ...] = ()


def lab_unsupported_reason(device, precision):
    return "the lab engine is not built yet"


def install_lab_engine(chat, device, precision, compile):
    raise NotImplementedError("the lab engine is not built yet")
