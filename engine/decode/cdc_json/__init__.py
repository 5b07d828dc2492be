"""Generic CDC JSON (``source.format = "cdc-json"``): see :mod:`.decoder` and :mod:`.order`."""

from engine.decode.cdc_json.decoder import CdcJsonDecoder, key_text
from engine.decode.cdc_json.order import OrderError, encode_order

__all__ = ["CdcJsonDecoder", "OrderError", "encode_order", "key_text"]
