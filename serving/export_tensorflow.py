"""Which TensorFlow wrote an export: the version its saved_model.pb records, read without TensorFlow.

A SavedModel records the TensorFlow that wrote it in
meta_graphs[0].meta_info_def.tensorflow_version ("2.15.1", "2.20.0"); serving.launch reads
it to run the TF Serving image built on that TensorFlow. TensorFlow's own message class
(tensorflow.core.protobuf.saved_model_pb2) imports the whole of TensorFlow first, seconds
for a launcher that otherwise starts in a fraction of one. So this module declares just
the three fields on that path, with their numbers and types in TensorFlow's
tensorflow/core/protobuf/saved_model.proto and meta_graph.proto, and protobuf's own parser
reads the file: every other field is skipped as an unknown one, not checked (a graph
damaged inside is TF Serving's load error, not this one's).
tests/serving/test_launch_image.py checks the reading against saved_model_pb2.

    .venv/bin/python -c "from serving import export_tensorflow as e; print(e.read_tensorflow_version('OUT/export/image_classifier/1500'))"
"""
import os

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory
from google.protobuf.message import DecodeError

from common import export_versions
from common.user_errors import UserError


class UnreadableSavedModel(UserError):
    """A saved_model.pb that is not a SavedModel (cut short, overwritten, another file)."""


def build_saved_model_class():
    """A SavedModel message class that knows only meta_graphs[].meta_info_def.tensorflow_version."""
    field = descriptor_pb2.FieldDescriptorProto
    proto = descriptor_pb2.FileDescriptorProto(
        name="serving/export_tensorflow.proto", package="tensorflow", syntax="proto3")
    saved_model = proto.message_type.add(name="SavedModel")
    saved_model.field.add(name="meta_graphs", number=2, label=field.LABEL_REPEATED,
                          type=field.TYPE_MESSAGE, type_name=".tensorflow.MetaGraphDef")
    meta_graph = proto.message_type.add(name="MetaGraphDef")
    meta_graph.field.add(name="meta_info_def", number=1, label=field.LABEL_OPTIONAL,
                         type=field.TYPE_MESSAGE, type_name=".tensorflow.MetaGraphDef.MetaInfoDef")
    meta_info = meta_graph.nested_type.add(name="MetaInfoDef")
    meta_info.field.add(name="tensorflow_version", number=5, label=field.LABEL_OPTIONAL,
                        type=field.TYPE_STRING)
    pool = descriptor_pool.DescriptorPool()  # its own pool: no clash with TensorFlow's classes
    pool.Add(proto)
    return message_factory.GetMessageClass(pool.FindMessageTypeByName("tensorflow.SavedModel"))


SavedModel = build_saved_model_class()


def parse_tensorflow_version(data, path):
    """The tensorflow_version of a saved_model.pb's bytes ("" when it records none);
    UnreadableSavedModel naming path when protobuf cannot parse them or they hold no meta graph."""
    saved_model = SavedModel()
    try:
        saved_model.ParseFromString(data)
    except DecodeError as e:
        raise UnreadableSavedModel(
            f"{path} is not a SavedModel that protobuf can parse ({e}); export it again, or copy "
            "the whole version directory again if a copy was cut short") from None
    if not saved_model.meta_graphs:
        raise UnreadableSavedModel(f"{path} holds no meta graph ({len(data)} bytes), so nothing "
                                   "can serve it; export it again")
    return saved_model.meta_graphs[0].meta_info_def.tensorflow_version


def read_tensorflow_version(version_dir):
    """The TensorFlow version that wrote version_dir's saved_model.pb ("2.15.1"; "" when it
    records none); UnreadableSavedModel when it cannot be read or parsed."""
    path = os.path.join(version_dir, export_versions.SAVED_MODEL_FILE)
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise UnreadableSavedModel(f"{path} cannot be read: {e.strerror}") from None
    return parse_tensorflow_version(data, path)
