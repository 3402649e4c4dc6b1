"""Server surface: health (whole server, service, per model), reflection,
ListModels / GetModel, the slot count from --state_memory_bytes, and Embed
(checked against the fixtures' encodings)."""

import subprocess
import unittest

import grpc
from google.protobuf import descriptor_pb2

import harness
from harness import pb
from grpc_health.v1 import health_pb2, health_pb2_grpc
from grpc_reflection.v1alpha import reflection_pb2, reflection_pb2_grpc

DECODER = "lm_causal_default"
ENCDEC = "encdec_basic"
ENCODER = "lm_bidir_padmask"
SKIPPED = "fastattn_softmax_causal"   # FastAttention alone: not a servable model
TEXT_MODEL = "byte_decoder"
TEXT_ENCODER = "byte_encoder"
SERVICE = "performer.v1.Generation"
MAX_BATCH = 8
ATOL = 1e-4
RTOL = 1e-4


class ModelsTest(harness.ServerTestCase):
    NAME = "models"
    # Reflection is off unless asked for (test_security checks the default).
    FLAGS = ("--max_batch=%d" % MAX_BATCH, "--default_model=%s" % DECODER, "--reflection")

    @classmethod
    def models(cls, repo):
        repo.add_required(DECODER, ENCDEC, ENCODER)
        cases = harness.list_cases()
        cls.has_skipped = SKIPPED in cases
        if cls.has_skipped:
            repo.add(SKIPPED)
        repo.add("lm_reversible_causal" if "lm_reversible_causal" in cases else DECODER,
                 name=TEXT_MODEL, tokenizer={"type": "byte"})
        repo.add(ENCODER, name=TEXT_ENCODER, tokenizer={"type": "byte"})
        cls.served = {DECODER, ENCDEC, ENCODER, TEXT_MODEL, TEXT_ENCODER}
        cls.configs = {name: harness.load_json(harness.fixture_dir(name) + "/config.json")
                       for name in (DECODER, ENCDEC, ENCODER)}

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.health = health_pb2_grpc.HealthStub(cls.server.channel)

    # -- health ------------------------------------------------------------
    def check_health(self, service):
        return self.health.Check(health_pb2.HealthCheckRequest(service=service), timeout=10)

    def test_health_serving(self):
        for service in ["", SERVICE] + ["%s/%s" % (SERVICE, m) for m in sorted(self.served)]:
            with self.subTest(service=service):
                response = self.check_health(service)
                self.assertEqual(response.status, health_pb2.HealthCheckResponse.SERVING,
                                 health_pb2.HealthCheckResponse.ServingStatus.Name(
                                     response.status))

    def test_health_unknown_service(self):
        for service in ("%s/no_such_model" % SERVICE, "no.such.Service"):
            with self.subTest(service=service):
                try:
                    response = self.check_health(service)
                except grpc.RpcError as e:
                    self.assertEqual(e.code(), grpc.StatusCode.NOT_FOUND, e.details())
                else:
                    self.assertEqual(response.status,
                                     health_pb2.HealthCheckResponse.SERVICE_UNKNOWN,
                                     "unknown service %r reported %s" % (service, response))

    # -- reflection ----------------------------------------------------------
    def reflect(self, **request_fields):
        stub = reflection_pb2_grpc.ServerReflectionStub(self.server.channel)
        responses = list(stub.ServerReflectionInfo(
            iter([reflection_pb2.ServerReflectionRequest(**request_fields)]), timeout=10))
        self.assertEqual(len(responses), 1)
        return responses[0]

    def test_reflection_lists_services(self):
        response = self.reflect(list_services="*")
        self.assertEqual(response.WhichOneof("message_response"), "list_services_response",
                         response)
        names = {s.name for s in response.list_services_response.service}
        self.assertIn(SERVICE, names)
        self.assertIn("grpc.health.v1.Health", names)

    def test_reflection_describes_generation(self):
        response = self.reflect(file_containing_symbol=SERVICE)
        self.assertEqual(response.WhichOneof("message_response"), "file_descriptor_response",
                         response)
        methods = set()
        for blob in response.file_descriptor_response.file_descriptor_proto:
            fd = descriptor_pb2.FileDescriptorProto.FromString(blob)
            if fd.package != "performer.v1":
                continue
            for service in fd.service:
                if service.name == "Generation":
                    methods = {m.name for m in service.method}
        self.assertEqual(methods, {"GenerateStream", "Generate", "Cancel", "ListModels",
                                   "GetModel", "Embed", "DeleteSession", "ExportSession",
                                   "ImportSession", "TakeSession"})

    # -- models ---------------------------------------------------------------
    def test_listening_line(self):
        self.assertRegex(self.server.log(),
                         r"\[info\] listening address=127\.0\.0\.1:%d\b" % self.server.port)

    def test_list_models(self):
        response = self.stub.ListModels(pb.ListModelsRequest(), timeout=10)
        by_name = {m.name: m for m in response.models}
        self.assertEqual(set(by_name), self.served,
                         "FastAttention folders are not models" if self.has_skipped else "")
        self.assertEqual(len(response.models), len(by_name), "duplicate names")
        self.assertEqual(response.default_model, DECODER)

        dec = by_name[DECODER]
        self.assertEqual(dec.kind, pb.MODEL_KIND_DECODER)
        self.assertEqual(dec.vocab_size, self.configs[DECODER]["num_tokens"])
        self.assertEqual(dec.max_sequence_length, self.configs[DECODER]["max_seq_len"])
        self.assertEqual(dec.tokenizer, "")

        ed = by_name[ENCDEC]
        self.assertEqual(ed.kind, pb.MODEL_KIND_ENCODER_DECODER)
        self.assertEqual(ed.vocab_size, self.configs[ENCDEC]["dec_num_tokens"])
        self.assertEqual(ed.max_sequence_length, self.configs[ENCDEC]["dec_max_seq_len"])

        enc = by_name[ENCODER]
        self.assertEqual(enc.kind, pb.MODEL_KIND_ENCODER)
        self.assertEqual(enc.vocab_size, self.configs[ENCODER]["num_tokens"])
        self.assertEqual(enc.max_sequence_length, self.configs[ENCODER]["max_seq_len"])
        self.assertTrue(enc.ready)

        self.assertEqual(by_name[TEXT_MODEL].tokenizer, "byte")
        self.assertEqual(by_name[TEXT_MODEL].kind, pb.MODEL_KIND_DECODER)

        for name in (DECODER, ENCDEC, TEXT_MODEL):
            m = by_name[name]
            with self.subTest(model=name):
                self.assertTrue(m.ready)
                self.assertGreater(m.state_bytes_per_sequence, 0)
                self.assertEqual(m.max_sequences, MAX_BATCH,
                                 "min(--max_batch, 1 GiB / state bytes)")
                self.assertEqual(m.active_sequences, 0)
                self.assertEqual(m.queued_requests, 0)

    def test_get_model(self):
        listed = {m.name: m for m in self.stub.ListModels(pb.ListModelsRequest(),
                                                          timeout=10).models}
        for name, expected in listed.items():
            with self.subTest(model=name):
                got = self.stub.GetModel(pb.GetModelRequest(name=name), timeout=10)
                self.assertEqual(got, expected)
        default = self.stub.GetModel(pb.GetModelRequest(), timeout=10)
        self.assertEqual(default.name, DECODER)

    def test_state_memory_budget_sets_slots(self):
        state = self.stub.GetModel(pb.GetModelRequest(name=DECODER),
                                   timeout=10).state_bytes_per_sequence
        repo = harness.ModelRepository("slots")
        repo.add(DECODER)
        server = harness.Server(repo.dir, ["--max_batch=64",
                                           "--state_memory_bytes=%d" % (3 * state + state // 2)],
                                name="slots")
        try:
            server.start()
            info = server.model_info(DECODER)
            self.assertEqual(info.state_bytes_per_sequence, state)
            self.assertEqual(info.max_sequences, 3, "floor(3.5 states) slots")
        finally:
            server.stop()

    def test_model_memory_budget_counts_the_served_weights(self):
        info = self.stub.GetModel(pb.GetModelRequest(name=DECODER), timeout=10)
        state, weights = info.state_bytes_per_sequence, info.weight_bytes
        budget = weights + 3 * state + state // 2
        repo = harness.ModelRepository("model_memory")
        repo.add(DECODER)
        slots = {}
        for dtype in ("fp32", "int8"):
            server = harness.Server(repo.dir, ["--max_batch=64", "--weight_dtype=" + dtype,
                                               "--model_memory_bytes=%d" % budget],
                                    name="model_memory_" + dtype)
            try:
                server.start()
                served = server.model_info(DECODER)
                self.assertEqual(served.weight_dtype, dtype)
                room = budget - served.weight_bytes
                self.assertEqual(served.max_sequences, room // state)
                slots[dtype] = served.max_sequences
            finally:
                server.stop()
        self.assertEqual(slots["fp32"], 3, "floor(3.5 states) beside the float32 weights")
        self.assertGreater(slots["int8"], 3, "int8 weights leave room for more sequences")
        # Weights that leave no room for one sequence: the model does not load.
        result = subprocess.run([harness.server_binary(), "--model_repository=" + repo.dir,
                                 "--port=0", "--metrics_port=-1",
                                 "--model_memory_bytes=%d" % (weights + state // 2)],
                                capture_output=True, text=True, timeout=120)
        self.assertNotEqual(result.returncode, 0)
        self.assertIn("more than --model_memory_bytes=%d" % (weights + state // 2),
                      result.stderr)

    # -- embed ----------------------------------------------------------------
    def embed(self, model, ids, pooling):
        req = pb.EmbedRequest(model=model, pooling=pooling)
        req.tokens.ids.extend(ids)
        return self.stub.Embed(req, timeout=30)

    def assertClose(self, got, expected, what):
        self.assertEqual(len(got), len(expected), what)
        worst = max(abs(g - e) - (ATOL + RTOL * abs(e)) for g, e in zip(got, expected))
        self.assertLessEqual(worst, 0.0, "%s differs beyond atol/rtol 1e-4" % what)

    def test_embed_encoder_model(self):
        io = harness.load_safetensors(harness.fixture_dir(ENCODER) + "/io.safetensors")
        dim = self.configs[ENCODER]["dim"]
        tokens = io["tokens"].rows()
        masks = io["mask"].rows()
        n = io["tokens"].shape[1]
        encodings = io["encodings"].values
        row = next((i for i, m in enumerate(masks) if all(m)), None)
        ids = tokens[row] if row is not None else tokens[0][:8]

        none = self.embed(ENCODER, ids, pb.POOLING_NONE)
        self.assertEqual(none.dim, dim)
        self.assertEqual(none.tokens, len(ids))
        self.assertEqual(len(none.values), len(ids) * dim)
        mean = self.embed(ENCODER, ids, pb.POOLING_MEAN)
        self.assertEqual(mean.dim, dim)
        self.assertEqual(len(mean.values), dim)
        unspecified = self.embed(ENCODER, ids, pb.POOLING_UNSPECIFIED)
        self.assertEqual(list(unspecified.values), list(mean.values), "unspecified = mean")
        # Mean pooling is the mean of the per-token vectors.
        means = [sum(none.values[t * dim + d] for t in range(len(ids))) / len(ids)
                 for d in range(dim)]
        self.assertClose(list(mean.values), means, "mean of POOLING_NONE rows")
        if row is not None:
            # An all-true mask row of the fixture: the unmasked forward.
            expected = encodings[row * n * dim:(row + 1) * n * dim]
            self.assertClose(list(none.values), expected, "encodings row %d" % row)

    def test_embed_text(self):
        ids = [i for i in harness.load_safetensors(
            harness.fixture_dir(ENCODER) + "/io.safetensors")["tokens"].rows()[0] if i < 128]
        by_ids = self.embed(TEXT_ENCODER, ids, pb.POOLING_NONE)
        req = pb.EmbedRequest(model=TEXT_ENCODER, text=bytes(ids).decode("ascii"),
                              pooling=pb.POOLING_NONE)
        by_text = self.stub.Embed(req, timeout=30)
        self.assertEqual(by_text.tokens, len(ids))
        self.assertEqual(list(by_text.values), list(by_ids.values), "byte tokenizer: text = ids")

    def test_embed_encoder_of_encoder_decoder(self):
        io = harness.load_safetensors(harness.fixture_dir(ENCDEC) + "/io.safetensors")
        ids = io["gen_enc_tokens"].values
        dim = self.configs[ENCDEC]["dim"]
        none = self.embed(ENCDEC, ids, pb.POOLING_NONE)
        self.assertEqual(none.dim, dim)
        self.assertEqual(none.tokens, len(ids))
        if all(io["gen_enc_mask"].values):
            self.assertClose(list(none.values), io["gen_encodings"].values, "gen_encodings")


if __name__ == "__main__":
    unittest.main()
