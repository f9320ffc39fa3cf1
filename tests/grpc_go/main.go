// A gRPC client on grpc-go (Debian's golang-google-grpc-dev), the library grpcurl is built on:
// it does what `grpcurl list`, `grpcurl describe` and a health probe do, against an ORBIT
// server's --grpc-addr, and prints one line per finding for tests/grpc_go_client_test.ts.
//
//	go run main.go 127.0.0.1:7234
package main

import (
	"context"
	"fmt"
	"os"
	"sort"
	"time"

	"github.com/golang/protobuf/proto"
	descpb "github.com/golang/protobuf/protoc-gen-go/descriptor"
	"google.golang.org/grpc"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	rpb "google.golang.org/grpc/reflection/grpc_reflection_v1alpha"
)

func main() {
	if len(os.Args) != 2 {
		fmt.Fprintln(os.Stderr, "usage: main <host:port>")
		os.Exit(2)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	conn, err := grpc.DialContext(ctx, os.Args[1], grpc.WithInsecure(), grpc.WithBlock())
	check(err)
	defer conn.Close()

	h, err := healthpb.NewHealthClient(conn).Check(ctx, &healthpb.HealthCheckRequest{})
	check(err)
	fmt.Println("health", h.Status.String())

	stream, err := rpb.NewServerReflectionClient(conn).ServerReflectionInfo(ctx)
	check(err)
	ask := func(req *rpb.ServerReflectionRequest) *rpb.ServerReflectionResponse {
		check(stream.Send(req))
		res, err := stream.Recv()
		check(err)
		return res
	}
	list := ask(&rpb.ServerReflectionRequest{
		MessageRequest: &rpb.ServerReflectionRequest_ListServices{ListServices: "*"},
	}).GetListServicesResponse()
	names := []string{}
	for _, s := range list.GetService() {
		names = append(names, s.GetName())
	}
	sort.Strings(names)
	for _, n := range names {
		fmt.Println("service", n)
	}
	files := ask(&rpb.ServerReflectionRequest{
		MessageRequest: &rpb.ServerReflectionRequest_FileContainingSymbol{
			FileContainingSymbol: "orbit.v1.Workers",
		},
	}).GetFileDescriptorResponse().GetFileDescriptorProto()
	for _, b := range files {
		fd := &descpb.FileDescriptorProto{}
		check(proto.Unmarshal(b, fd))
		for _, s := range fd.GetService() {
			if s.GetName() != "Workers" {
				continue
			}
			for _, m := range s.GetMethod() {
				fmt.Printf("method %s.%s.%s(%s) returns (%s)\n", fd.GetPackage(), s.GetName(),
					m.GetName(), m.GetInputType(), m.GetOutputType())
			}
		}
	}
}

func check(err error) {
	if err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
