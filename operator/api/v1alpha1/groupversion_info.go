// Package v1alpha1 contains the KVCluster API of the kv.levee.io group.
// +kubebuilder:object:generate=true
// +groupName=kv.levee.io
package v1alpha1

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/scheme"
)

var (
	// GroupVersion is the group and version of the KVCluster API.
	GroupVersion = schema.GroupVersion{Group: "kv.levee.io", Version: "v1alpha1"}

	// SchemeBuilder registers the API types with a runtime.Scheme.
	SchemeBuilder = &scheme.Builder{GroupVersion: GroupVersion}

	// AddToScheme adds the types of this group-version to a scheme.
	AddToScheme = SchemeBuilder.AddToScheme
)
