"""Stubs generated from proto/proto/boxd/v1/boxd.proto by sdk/python/generate.sh.

Do not edit: run the script again after changing the proto.
"""
